// Package autoupdate keeps clients on the latest good release of their
// channel, as in the GopherCon 2018 auto-update talk: the operator asks a
// gRPC version server which release a client should run, starts an
// instance of it, health-checks it, and only once it is healthy condemns
// the old instance. A release whose instance fails its health check is
// recorded and never applied again.
//
// The talk's lifecycle is the graph: the current client goes Processed →
// Updating → Condemned (the new instance cleans up the old one) →
// Processed, and a new release goes Start → Updating → Processed, or →
// Failed when its health check fails. Every state that waits has a
// timeout edge, so that nothing gets stuck.
package autoupdate

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kfsm/kfsm/examples/autoupdate/host"
	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	"github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// The states of a managed client.
const (
	Start     fsm.State = "Start"
	Updating  fsm.State = "Updating"
	Processed fsm.State = "Processed"
	Condemned fsm.State = "Condemned"
	Failed    fsm.State = "Failed"
	Removed   fsm.State = "Removed"
)

// Operator holds the handlers' connections and timings.
type Operator struct {
	Versions versionpb.VersionServiceClient
	Host     *host.Client

	// Poll is how often a client asks the version server, give or take a
	// tenth; a change of the client itself is acted on at once.
	Poll time.Duration
	// HealthEvery, HealthTimeout and HealthThreshold: a new instance is
	// checked every HealthEvery, each check may take HealthTimeout, and
	// HealthThreshold failed checks in a row fail the release.
	HealthEvery, HealthTimeout time.Duration
	HealthThreshold            int32
	// UpdateTimeout fails a release whose instance is not healthy in time.
	UpdateTimeout time.Duration
}

// defaults fills in the timings left zero.
func (o *Operator) defaults() {
	o.Poll = cmp.Or(o.Poll, 30*time.Second)
	o.HealthEvery = cmp.Or(o.HealthEvery, 500*time.Millisecond)
	o.HealthTimeout = cmp.Or(o.HealthTimeout, time.Second)
	o.UpdateTimeout = cmp.Or(o.UpdateTimeout, time.Minute)
	o.HealthThreshold = cmp.Or(o.HealthThreshold, 3)
}

// Machine returns the managed client's machine.
func (o *Operator) Machine() *fsm.Machine[*v1alpha1.ManagedClient] {
	o.defaults()
	return fsm.New[*v1alpha1.ManagedClient]("autoupdate", fsm.Lifecycle).
		Initial(Start).
		State(Start, o.start, fsm.To(Updating)).
		State(Updating, o.update, fsm.To(Processed, Condemned, Failed), fsm.Timeout(o.UpdateTimeout, Failed)).
		State(Condemned, o.condemn, fsm.To(Processed)).
		State(Failed, o.fail, fsm.To(Processed, Start)).
		State(Processed, o.process, fsm.To(Updating)).
		OnDelete(Removed).
		State(Removed, o.remove, fsm.Final()).
		Tune(fsm.Tuning{Resync: o.Poll})
}

type request = fsm.Request[*v1alpha1.ManagedClient]

// start waits for a first release that has not failed before.
func (o *Operator) start(ctx context.Context, r *request) fsm.Result {
	rel, ok := o.ask(ctx, r)
	if !ok {
		return fsm.Wait(o.Poll, "WaitingForRelease")
	}
	r.Object.Status.Target = rel
	return fsm.Next(Updating)
}

// process is the steady state: it asks for the release now and then, and
// moves to a new one that has not failed before.
func (o *Operator) process(ctx context.Context, r *request) fsm.Result {
	rel, ok := o.ask(ctx, r)
	if !ok || rel.Version == r.Object.Status.Version {
		return fsm.Done() // the client keeps running; Resync asks again
	}
	r.Object.Status.Target = rel
	return fsm.Next(Updating)
}

// ask asks the version server for the client's release. It reports
// false when there is none to apply: the server cannot be reached or
// offers a release that the status cannot hold (the status says why), or
// it offers a release that failed before.
func (o *Operator) ask(ctx context.Context, r *request) (v1alpha1.Release, bool) {
	st := &r.Object.Status
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := o.Versions.GetVersion(ctx, &versionpb.GetVersionRequest{
		Client: r.Object.Name, Channel: r.Object.Spec.Channel, CurrentVersion: st.Version,
	})
	if err != nil {
		return refuse(r, "VersionServerUnavailable", fmt.Sprintf("asking the version server: %s", status.Convert(err).Message()))
	}
	pkg := resp.GetPackage()
	if err := fits(pkg); err != nil {
		return refuse(r, "ReleaseRefused", fmt.Sprintf("the version server offered a release that the status cannot hold: %v", err))
	}
	st.ServerError = ""
	st.Offered = pkg.GetVersion()
	if pkg.GetVersion() == "" || slices.Contains(st.FailedVersions, pkg.GetVersion()) {
		return v1alpha1.Release{}, false
	}
	return v1alpha1.Release{
		Version: pkg.GetVersion(), ConfigYAML: pkg.GetConfigYaml(),
		// A negative startup time is none.
		StartupMillis: max(pkg.GetRuntime().GetStartupMillis(), 0),
		Broken:        ptr.To(pkg.GetRuntime().GetBroken()),
	}, true
}

// refuse records in the status why the version server gave no release,
// with an event when the reason is new.
func refuse(r *request, reason, msg string) (v1alpha1.Release, bool) {
	msg = cut(msg, v1alpha1.MaxServerErrorLength)
	if r.Object.Status.ServerError != msg {
		r.Event(corev1.EventTypeWarning, reason, msg)
	}
	r.Object.Status.ServerError = msg
	return v1alpha1.Release{}, false
}

// fits refuses a release whose version or configuration is longer than
// the status holds.
func fits(pkg *versionpb.Package) error {
	if n := len(pkg.GetVersion()); n > v1alpha1.MaxVersionLength {
		return fmt.Errorf("its version has %d bytes, more than %d", n, v1alpha1.MaxVersionLength)
	}
	if n := len(pkg.GetConfigYaml()); n > v1alpha1.MaxConfigLength {
		return fmt.Errorf("its configuration has %d bytes, more than %d", n, v1alpha1.MaxConfigLength)
	}
	return nil
}

// cut shortens s to at most n bytes, without splitting a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// update starts the target's instance (or finds it running, after a
// restart) and checks its health until it passes or fails for good.
func (o *Operator) update(ctx context.Context, r *request) fsm.Result {
	st := &r.Object.Status
	rel := st.Target
	if rel.Version == "" {
		return fsm.Stop("NoTarget", "updating without a target release")
	}
	name := instanceName(r.Object.Name, rel.Version)
	address := ""
	if i := slices.IndexFunc(st.Instances, func(in v1alpha1.Instance) bool { return in.Name == name }); i >= 0 {
		address = st.Instances[i].Address
	}
	if address == "" {
		// Starting the instance is the upgrade's effect on the world, and
		// can take a while: an action, so that an operator that dies in
		// the middle of it resumes it rather than guesses. Ensure finds
		// an instance of the name that runs already, so running it again
		// under the same key starts nothing twice.
		spec := host.Spec{Version: rel.Version, ConfigYAML: rel.ConfigYAML, StartupMillis: rel.StartupMillis, Broken: ptr.Deref(rel.Broken, false)}
		a := r.Action("start-"+rel.Version, func(ctx context.Context, run *fsm.ActionRun) error {
			in, err := o.Host.Ensure(ctx, name, spec)
			run.Result = in.Address
			return err
		}, fsm.Idempotent(), fsm.ActionKind("start"))
		switch a.State {
		case fsm.ActionPending:
			return fsm.Wait(0, "Starting")
		case fsm.ActionFailed:
			return fsm.Fail(a.Err)
		}
		address = a.Result
	}
	for i := range st.Instances {
		st.Instances[i].State = v1alpha1.InstanceUpdating
	}
	setInstance(st, v1alpha1.Instance{Name: name, Version: rel.Version, Address: address, State: v1alpha1.InstanceUpdating})

	health, err := o.Host.Check(ctx, address, o.HealthTimeout)
	switch health {
	case host.Starting:
		return fsm.Wait(o.HealthEvery, "Starting")
	case host.Unhealthy:
		st.HealthFailures++
		r.Log.Info("health check failed", "version", rel.Version, "failures", st.HealthFailures, "error", err.Error())
		if st.HealthFailures >= o.HealthThreshold {
			return fsm.Next(Failed)
		}
		return fsm.Wait(o.HealthEvery, "HealthChecking")
	}
	st.HealthFailures = 0
	st.Version, st.Target = rel.Version, v1alpha1.Release{}
	for i := range st.Instances {
		st.Instances[i].State = v1alpha1.InstanceCondemned
	}
	setInstance(st, v1alpha1.Instance{Name: name, Version: rel.Version, Address: address, State: v1alpha1.InstanceProcessed})
	if len(st.Instances) > 1 {
		return fsm.Next(Condemned)
	}
	return fsm.Next(Processed)
}

// condemn stops the old instances: the new one cleans up after them.
func (o *Operator) condemn(ctx context.Context, r *request) fsm.Result {
	st := &r.Object.Status
	for _, in := range slices.Clone(st.Instances) {
		if in.State != v1alpha1.InstanceCondemned {
			continue
		}
		if err := o.Host.Remove(ctx, in.Name); err != nil {
			return fsm.Fail(err)
		}
		st.Instances = slices.DeleteFunc(st.Instances, func(i v1alpha1.Instance) bool { return i.Name == in.Name })
	}
	return fsm.Next(Processed)
}

// fail records the target as failed, stops its instance and keeps the
// old one serving.
func (o *Operator) fail(ctx context.Context, r *request) fsm.Result {
	st := &r.Object.Status
	if rel := st.Target; rel.Version != "" {
		name := instanceName(r.Object.Name, rel.Version)
		if err := o.Host.Remove(ctx, name); err != nil {
			return fsm.Fail(err)
		}
		st.Instances = slices.DeleteFunc(st.Instances, func(i v1alpha1.Instance) bool { return i.Name == name })
		if !slices.Contains(st.FailedVersions, rel.Version) {
			st.FailedVersions = remember(st.FailedVersions, rel.Version)
			r.Event(corev1.EventTypeWarning, "VersionFailed", fmt.Sprintf("version %s failed its health check and will not be applied again", rel.Version))
		}
	}
	st.Target, st.HealthFailures = v1alpha1.Release{}, 0
	for i := range st.Instances {
		st.Instances[i].State = v1alpha1.InstanceProcessed
	}
	if st.Version == "" {
		return fsm.Next(Start)
	}
	return fsm.Next(Processed)
}

// remove stops every instance of a deleted client.
func (o *Operator) remove(ctx context.Context, r *request) fsm.Result {
	st := &r.Object.Status
	for _, in := range st.Instances {
		if err := o.Host.Remove(ctx, in.Name); err != nil {
			return fsm.Fail(err)
		}
	}
	if st.Target.Version != "" {
		if err := o.Host.Remove(ctx, instanceName(r.Object.Name, st.Target.Version)); err != nil {
			return fsm.Fail(err)
		}
	}
	st.Instances = nil
	return fsm.Done()
}

// remember adds version to the failed versions, forgetting the oldest
// beyond what the status holds.
func remember(failed []string, version string) []string {
	failed = append(failed, version)
	return failed[max(len(failed)-v1alpha1.MaxFailedVersions, 0):]
}

func setInstance(st *v1alpha1.ManagedClientStatus, in v1alpha1.Instance) {
	if i := slices.IndexFunc(st.Instances, func(x v1alpha1.Instance) bool { return x.Name == in.Name }); i >= 0 {
		st.Instances[i] = in
		return
	}
	st.Instances = append(st.Instances, in)
}

// instanceName names the instance of a version, the same across restarts,
// so that starting it again finds the one that runs.
func instanceName(client, version string) string {
	return client + "-" + strings.NewReplacer(".", "-", "+", "-").Replace(version)
}
