package fsmtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

const (
	Ready    fsm.State = "Ready"
	Counting fsm.State = "Counting"
)

// sloppy holds machines with one classic operator bug each, and the same
// machine done right; each fault class must catch its bug and pass the
// correct machine.
var sloppy = map[string]struct {
	class    fsmtest.Fault
	machine  func(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget]
	scenario func(*fsmtest.Env)
	caught   string // what the failure names: the fault point
}{
	// A child created with generateName: after a crash between its
	// creation and the status write, a second one.
	"GenerateName": {class: fsmtest.Crash, machine: generated, scenario: createAndDelete, caught: `crash:configmaps/g-ledger-:1: crash after the object's write 1 \(create configmaps\b`},
	// A status list appended to on every run: a new process runs the
	// handler again.
	"NotIdempotent": {class: fsmtest.Crash, machine: appending, scenario: createAndDelete, caught: `crash after the object's write \d+ \(patch gadgets.testing.kfsm.dev g status\)`},
	// An error ignored: the child a failed write did not create is never
	// created.
	"IgnoredError": {class: fsmtest.FailWrite, machine: ignoring, scenario: createAndDelete, caught: `the object's write 1 \(create configmaps\b.*\) failed before reaching the server`},
	// Children counted in the cache and made up to a number: with a
	// lagging cache, the handler does not see those it made and makes
	// more.
	"StaleCache": {class: fsmtest.StaleReads, machine: scaling, scenario: scale, caught: `lag: every watch event 1s late`},
	// A conflict taken as final: the object stops instead of retrying.
	"ConflictStops": {class: fsmtest.Conflicts, machine: stopping, scenario: threeTargets, caught: `conflict:configmaps/g-ledger:\d+: the object's write \d+ \(update configmaps g-ledger\) answered 409 Conflict`},
	// Counting spec changes one by one: a burst of changes is seen once.
	"CountsChanges": {class: fsmtest.Bursts, machine: counting, scenario: threeTargets, caught: `burst: the operator stopped until the scenario's last change before deleting`},
	// An action declared Idempotent whose effect is not: a crash inside
	// it charges twice.
	"ChargesTwice": {class: fsmtest.CrashInAction, machine: charging, scenario: createAndDelete, caught: `crash as the work of action 1 \([^)]*\) (starts|returns)`},
	// A create retried after its answer was lost as an action of a new
	// name, so under a new client token, and never observed: a second VM.
	// A crash does not show it: the action that was cut is observed.
	"LostAnswerBillsTwice": {class: fsmtest.OutsideFailures, machine: provisioning, scenario: createAndDelete, caught: `call 1 \(cloud create\) made its effect, and (its answer was lost|its caller timed out)`},
	// The lamp's setting trusted from the status of the last pass: a
	// lamp reset behind the operator stays dark.
	"TrustsItsLastLook": {class: fsmtest.Drift, machine: dimming, scenario: renamedLamp, caught: `before the scenario's change 2 \(update Gadget/g\), an outside system made its drift reset behind the operator`},
}

func createAndDelete(e *fsmtest.Env) {
	g := gadget()
	e.Create(g)
	e.AwaitReady(g)
	e.Delete(g)
	e.AwaitGone(g)
}

// The same scenarios with correct handlers pass their fault class.
func TestFaultsPassCorrectMachines(t *testing.T) {
	t.Parallel()
	for name, tc := range sloppy {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsmtest.Faults(t, tc.machine(false), tc.scenario, fsmtest.Only(tc.class), fsmtest.Lag(time.Second))
		})
	}
}

// Each fault class catches its bug, and the failure names the fault
// point, what failed, the transitions beside the clean run's and how to
// replay it; Explore, with every kind of fault, catches machines that no
// class of Faults reaches. The broken machines run in a test process of
// their own, whose failure is the expected outcome.
func TestFaultsCatchBrokenMachines(t *testing.T) {
	if os.Getenv("FSMTEST_BROKEN") != "" {
		t.Skip("running inside the broken machines' own process")
	}
	if testing.Short() {
		t.Skip("fault injection runs without -short")
	}
	t.Parallel() // another process does the work
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestBrokenMachines$", "-test.v", "-kfsm.covermin=100")
	cmd.Env = append(os.Environ(), "FSMTEST_BROKEN=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the broken machines passed fault injection:\n%s", out)
	}
	for name, tc := range sloppy {
		// The machine's subtest fails, naming the fault point, with a
		// command that replays the run.
		if !strings.Contains(string(out), "--- FAIL: TestBrokenMachines/"+name+" ") {
			t.Errorf("%s: Faults with %s did not fail it", name, tc.class)
		}
		if !regexp.MustCompile(tc.caught).Match(out) {
			t.Errorf("%s: the failure does not name the fault point %q", name, tc.caught)
		}
		if !strings.Contains(string(out), "replay: go test -run '^TestBrokenMachines$/^"+name+"$' . -kfsm.explore='") {
			t.Errorf("%s: no replay command", name)
		}
	}
	if !strings.Contains(string(out), "transitions, the clean run's | this run's:") {
		t.Errorf("no transitions beside the clean run's")
	}
	// An invoice sent again after a failed write shows in the effects
	// alone: the snapshots of the two runs are the same.
	if !strings.Contains(string(out), "--- FAIL: TestBrokenMachines/InvoicesInTheHandler ") ||
		!strings.Contains(string(out), "the effects outside the cluster differ from the clean run: invoices: 1 in the clean run, 2 in this one") {
		t.Errorf("InvoicesInTheHandler: the invoice sent twice was not found")
	}
	// A machine that stops after a conflict comes to rest short of Ready:
	// its run fails once the operator has been at rest a while, not at
	// the timeout.
	if !regexp.MustCompile(`waited \d+s for Gadget/g to be Ready, and the operator came to rest without it: kstatus says Failed`).Match(out) {
		t.Errorf("ConflictStops: the failure does not say that the operator came to rest short of Ready")
	}
	// The machine that counts its runs fails its clean run already, as not
	// at rest.
	if !regexp.MustCompile(`(?s)the clean run failed.*not at rest \(eventual stable reconciliation\).*made 1 write\(s\): patch gadgets.testing.kfsm.dev g status, with nothing changed`).Match(out) {
		t.Errorf("the restless machine was not found restless")
	}
	// The machine whose timeout path never comes to rest fails once the
	// clock jumps past its timeout, which the clean run never reaches.
	if !strings.Contains(string(out), "replay: go test -run '^TestBrokenMachines$/^Expiring$' . -kfsm.explore='clock:2'") {
		t.Errorf("the expiring machine was not caught by a jump of the clock after its second step")
	}
	// The machine that invoices on every run of its Ready state fails its
	// clean run too: the resync at rest sent an invoice.
	if !strings.Contains(string(out), "--- FAIL: TestBrokenMachines/Dunning ") ||
		!regexp.MustCompile(`caused effects outside the cluster, with nothing changed: invoices: \d+ before, \d+ after`).Match(out) {
		t.Errorf("the dunning machine was not found sending invoices at rest")
	}
	// The replay command runs the clean run and that one faulty run again,
	// and it fails again.
	replay := regexp.MustCompile(`replay: go test -run '(\^TestBrokenMachines\$/\^GenerateName\$)' \. -kfsm.explore='([^']+)'`).FindSubmatch(out)
	if replay == nil {
		t.Fatalf("no replay command for GenerateName:\n%s", out)
	}
	again := exec.CommandContext(t.Context(), os.Args[0], "-test.run", string(replay[1]), "-test.v", "-kfsm.explore="+string(replay[2]))
	again.Env = cmd.Env
	out2, err := again.CombinedOutput()
	if err == nil || strings.Count(string(out2), "a run with ") != 1 || strings.Contains(string(out2), "explored up to") {
		t.Errorf("the replay of %s did not run that one schedule and fail:\n%s", replay[2], out2)
	}

	// Their tests take only some edges: the threshold fails the package
	// too, naming the machines under it.
	if !regexp.MustCompile(`edge coverage under 100%: .*appending \(1/2\)`).Match(out) {
		t.Errorf("-kfsm.covermin=100 did not fail the package naming machine appending")
	}
	if t.Failed() {
		t.Logf("output of the broken machines:\n%s", out)
	}
}

// TestBrokenMachines runs only inside TestFaultsCatchBrokenMachines, two
// machines at a time (go test's -parallel), four runs of each at once.
func TestBrokenMachines(t *testing.T) {
	if os.Getenv("FSMTEST_BROKEN") == "" {
		t.Skip("run by TestFaultsCatchBrokenMachines in a process of its own")
	}
	for name, tc := range sloppy {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsmtest.Faults(t, tc.machine(true), tc.scenario, fsmtest.Only(tc.class), fsmtest.Lag(time.Second), fsmtest.Parallel(4))
		})
	}
	t.Run("InvoicesInTheHandler", func(t *testing.T) {
		t.Parallel()
		fsmtest.Faults(t, invoicing(true), createAndDelete, fsmtest.Only(fsmtest.FailWrite), countInvoices, fsmtest.Converge(20*time.Second), fsmtest.Parallel(4))
	})
	// Explore's alone: a jump of the fake clock, and the resync at rest.
	t.Run("Expiring", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, expiring(true), finishInTime, fsmtest.FailFast(), fsmtest.Parallel(4))
	})
	t.Run("Dunning", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, dunning, func(e *fsmtest.Env) {
			g := gadget()
			e.Create(g)
			e.AwaitReady(g)
		}, countInvoices, fsmtest.Parallel(4))
	})
	t.Run("Restless", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, restless(true), func(e *fsmtest.Env) {
			g := gadget()
			e.Create(g)
			e.AwaitReady(g)
		}, fsmtest.Parallel(4))
	})
}

// A machine on the fake clock: an injected failure (of a child's apply,
// say) fails the handler, whose backoff waits on the fake clock, which
// the scenario does not know to move. Faults moves it to the backoff's
// end once the operator is quiet, so every run of every class converges.
func TestFaultsMoveTheFakeClockPastABackoff(t *testing.T) {
	machine := func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("fake-clock", func(ctx context.Context, r *request) fsm.Result {
			if err := r.Apply(ctx, ledger(r.Object)); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next(Ready)
		}).WithClock(e.Clock)
	}
	start := time.Now()
	fsmtest.Faults(t, machine, createAndDelete, fsmtest.Converge(20*time.Second))
	t.Logf("every run converged in %v in all", time.Since(start).Round(time.Second))
}

// simple is a machine whose Working state does work, then Done; deletion
// runs Cleanup, which prunes the children kfsm applied.
func simple(name string, work func(context.Context, *request) fsm.Result) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget](name, fsm.Lifecycle).
		Initial(Working).
		State(Working, work, fsm.To(Ready)).
		State(Ready, func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.Final()).
		OnDelete(Cleanup).
		State(Cleanup, nil, fsm.Final()).
		Owns(&corev1.ConfigMap{})
}

func ledger(g *v1alpha1.Gadget) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name + "-ledger"}, Data: map[string]string{"owner": g.Name}}
}

func generated(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("generated", func(ctx context.Context, r *request) fsm.Result {
			cm := ledger(r.Object)
			if !broken {
				if err := r.Apply(ctx, cm); err != nil {
					return fsm.Fail(err)
				}
				return fsm.Next(Ready)
			}
			cm.Name, cm.GenerateName = "", r.Object.Name+"-ledger-"
			if err := controllerutil.SetControllerReference(r.Object, cm, r.Client.Scheme()); err != nil {
				return fsm.Fail(err)
			}
			if err := r.Client.Create(ctx, cm); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next(Ready)
		})
	}
}

func appending(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("appending", fsm.Lifecycle).
			Initial(Working).
			State(Working, func(_ context.Context, r *request) fsm.Result {
				if broken {
					r.Object.Status.Note += "seen;"
				} else {
					r.Object.Status.Note = "seen;"
				}
				return fsm.Done()
			}, fsm.To(Ready)).
			State(Ready, nil, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final())
	}
}

func ignoring(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("ignoring", func(ctx context.Context, r *request) fsm.Result {
			cm := ledger(r.Object)
			if err := controllerutil.SetControllerReference(r.Object, cm, r.Client.Scheme()); err != nil {
				return fsm.Fail(err)
			}
			err := r.Client.Create(ctx, cm)
			if !broken && client.IgnoreAlreadyExists(err) != nil {
				return fsm.Fail(err)
			}
			return fsm.Next(Ready)
		})
	}
}

// stopping keeps a ledger of the gadget's target, created and then
// updated with controllerutil.CreateOrUpdate. Broken, it takes a failed
// write, such as a conflict, as final and stops.
func stopping(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("stopping", fsm.Lifecycle).
			Initial(Working).
			State(Working, func(ctx context.Context, r *request) fsm.Result {
				cm := ledger(r.Object)
				_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
					cm.Data = map[string]string{"owner": r.Object.Name, "target": fmt.Sprint(r.Object.Spec.Target)}
					return controllerutil.SetControllerReference(r.Object, cm, r.Client.Scheme())
				})
				if err != nil {
					if broken {
						return fsm.Stop("WriteFailed", err.Error())
					}
					return fsm.Fail(err)
				}
				return fsm.Done()
			}, fsm.To(Ready)).
			State(Ready, nil, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final()).
			Owns(&corev1.ConfigMap{})
	}
}

// scale asks for three children.
func scale(e *fsmtest.Env) {
	g := gadget()
	g.Spec.Target = 3
	e.Create(g)
	e.AwaitReady(g)
	e.Delete(g)
	e.AwaitGone(g)
}

// scaling makes children until there are as many as the target. Broken,
// it counts them in the cache and names them with generateName; right,
// it names them, so that one it made before is found by name.
func scaling(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("scaling", func(ctx context.Context, r *request) fsm.Result {
			if !broken {
				for i := range r.Object.Spec.Target {
					cm := ledger(r.Object)
					cm.Name = fmt.Sprintf("%s-%d", r.Object.Name, i)
					if err := r.Apply(ctx, cm); err != nil {
						return fsm.Fail(err)
					}
				}
				return fsm.Next(Ready)
			}
			var list corev1.ConfigMapList
			if err := r.Client.List(ctx, &list, client.InNamespace(r.Object.Namespace), client.MatchingLabels{"scaling": r.Object.Name}); err != nil {
				return fsm.Fail(err)
			}
			if len(list.Items) >= int(r.Object.Spec.Target) {
				return fsm.Next(Ready)
			}
			cm := ledger(r.Object)
			cm.Name, cm.GenerateName, cm.Labels = "", r.Object.Name+"-", map[string]string{"scaling": r.Object.Name}
			if err := controllerutil.SetControllerReference(r.Object, cm, r.Client.Scheme()); err != nil {
				return fsm.Fail(err)
			}
			if err := r.Client.Create(ctx, cm); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Wait(200*time.Millisecond, "Scaling")
		})
	}
}

// threeTargets changes the target twice.
func threeTargets(e *fsmtest.Env) {
	g := gadget()
	g.Spec.Target = 1
	e.Create(g)
	e.AwaitReady(g)
	e.Update(g, func() { g.Spec.Target = 2 })
	e.AwaitReady(g)
	e.Update(g, func() { g.Spec.Target = 3 })
	e.AwaitReady(g)
	e.Delete(g)
	e.AwaitGone(g)
}

func counting(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("counting", fsm.Lifecycle).
			Initial(Working).
			State(Working, func(_ context.Context, r *request) fsm.Result {
				if broken {
					if r.Object.Status.ObservedGeneration != r.Object.Generation {
						r.Object.Status.Count++ // one more per change, it thinks
					}
				} else {
					r.Object.Status.Count = r.Object.Spec.Target
				}
				return fsm.Done()
			}, fsm.To(Ready)).
			State(Ready, nil, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final())
	}
}

// charges is the outside system that charging's action changes: the
// charges made for each gadget, by namespace and name.
var charges = struct {
	sync.Mutex
	made map[string]int
}{made: map[string]int{}}

// charging charges once for a gadget, in an action, and shows in its
// status how many charges the gadget has. Broken, it declares its action
// Idempotent, which a charge is not; right, it observes the charges.
func charging(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("charging", func(_ context.Context, r *request) fsm.Result {
			who := r.Object.Namespace + "/" + r.Object.Name
			made := func() int {
				charges.Lock()
				defer charges.Unlock()
				return charges.made[who]
			}
			resume := fsm.Observe(func(context.Context, *fsm.ActionRun) (bool, error) { return made() > 0, nil })
			if broken {
				resume = fsm.Idempotent()
			}
			a := r.Action("charge", func(context.Context, *fsm.ActionRun) error {
				charges.Lock()
				defer charges.Unlock()
				charges.made[who]++
				return nil
			}, resume)
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "Charging")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			r.Object.Status.Count = int32(made())
			return fsm.Next(Ready)
		})
	}
}

// A restarted operator that is slow to start (a large cache to fill)
// writes nothing meanwhile, yet it is not at rest: the snapshot of an
// Await that already held waits until the new process has walked every
// object, as the clean run's process had; and so does the snapshot
// taken after a crash and before the new process starts.
func TestFaultsWaitForARestartedOperatorToCatchUp(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	made := map[string]int{} // machines made, by namespace
	machine := func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		mu.Lock()
		made[e.Namespace]++
		later := made[e.Namespace] > 1
		mu.Unlock()
		if later {
			time.Sleep(2 * time.Second)
		}
		return simple("slow-start", func(context.Context, *request) fsm.Result { return fsm.Next(Ready) })
	}
	fsmtest.Faults(t, machine, func(e *fsmtest.Env) {
		a, b := gadget(), gadget()
		a.Name, b.Name = "a", "b"
		e.Create(a)
		e.Create(b)
		e.AwaitReady(a)
		e.AwaitReady(b)
	}, fsmtest.Only(fsmtest.Crash))
}

// vms is the cloud that provisioning's action creates VMs in: the VMs of
// each gadget, by namespace and name, each under the client token its
// create came with. A create under a token it has seen makes no new VM,
// as AWS's client tokens do; a create without one always does.
var vms = struct {
	sync.Mutex
	made map[string][]string
}{made: map[string][]string{}}

// provisioning creates a VM for a gadget in an action, through the
// cloud's fake declared as an outside system, and shows in its status how
// many VMs the gadget has. It sends the action's key as the client token
// and observes the cloud by it. Broken, it names the action after the
// handler's attempt, so that a failed create is retried as a new action,
// under a new key.
func provisioning(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		cloud := e.Outside("cloud")
		return simple("provisioning", func(_ context.Context, r *request) fsm.Result {
			who := r.Object.Namespace + "/" + r.Object.Name
			made := func() []string {
				vms.Lock()
				defer vms.Unlock()
				return slices.Clone(vms.made[who])
			}
			name := "provision"
			if broken {
				name = fmt.Sprintf("provision-%d", r.Attempt)
			}
			a := r.Action(name, func(_ context.Context, run *fsm.ActionRun) error {
				return cloud.Call("create", func() error {
					vms.Lock()
					defer vms.Unlock()
					if !slices.Contains(vms.made[who], run.Key) {
						vms.made[who] = append(vms.made[who], run.Key)
					}
					return nil
				})
			}, fsm.Observe(func(_ context.Context, run *fsm.ActionRun) (bool, error) {
				return slices.Contains(made(), run.Key), nil
			}))
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "Provisioning")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			r.Object.Status.Count = int32(len(made()))
			return fsm.Next(Ready)
		})
	}
}

// What names an action's run, its key (made of the object's UID) and its
// times, differs in every run by construction: a scenario that awaits
// while an action runs passes Faults without Ignore.
func TestFaultsLeaveOutWhatNamesAnActionsRun(t *testing.T) {
	var mu sync.Mutex
	gates := map[string]chan struct{}{} // by namespace, closed to end the upload
	gate := func(ns string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if gates[ns] == nil {
			gates[ns] = make(chan struct{})
		}
		return gates[ns]
	}
	machine := func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("uploading", func(_ context.Context, r *request) fsm.Result {
			done := gate(r.Object.Namespace)
			a := r.Action("upload", func(ctx context.Context, _ *fsm.ActionRun) error {
				select {
				case <-done:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, fsm.Idempotent())
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "Uploading")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			return fsm.Next(Ready)
		})
	}
	fsmtest.Faults(t, machine, func(e *fsmtest.Env) {
		g := gadget()
		e.Create(g)
		e.Await("the upload to run", func() bool {
			e.Get(g)
			return len(g.Status.Actions) == 1 && g.Status.Actions[0].Outcome == ""
		})
		close(gate(e.Namespace))
		e.AwaitReady(g)
		e.Delete(g)
		e.AwaitGone(g)
	}, fsmtest.Only(fsmtest.Conflicts))
}

// lamps is the fake of a system of lamps outside the cluster, one for
// each gadget by namespace and name, at the brightness last set.
var lamps = struct {
	sync.Mutex
	level map[string]int32
}{level: map[string]int32{}}

// dimming sets a gadget's lamp to its target, through the lamps' fake
// declared as an outside system, which can reset a lamp behind the
// operator (a power cut). Right, it reads the lamp on every run; broken,
// it trusts the status of its last run, which says the lamp is set.
func dimming(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		system := e.Outside("lamps")
		system.Drift("reset", func() {
			lamps.Lock()
			defer lamps.Unlock()
			for who := range lamps.level {
				if strings.HasPrefix(who, e.Namespace+"/") {
					lamps.level[who] = 0
				}
			}
		})
		keep := func(_ context.Context, r *request) fsm.Result {
			who, want := r.Object.Namespace+"/"+r.Object.Name, r.Object.Spec.Target
			if broken && r.Object.Status.Count == want {
				return fsm.Done()
			}
			var level int32
			if err := system.Call("get", func() error {
				lamps.Lock()
				defer lamps.Unlock()
				level = lamps.level[who]
				return nil
			}); err != nil {
				return fsm.Fail(err)
			}
			if level != want {
				if err := system.Call("set", func() error {
					lamps.Lock()
					defer lamps.Unlock()
					lamps.level[who] = want
					return nil
				}); err != nil {
					return fsm.Fail(err)
				}
			}
			r.Object.Status.Count = want
			return fsm.Done()
		}
		return fsm.New[*v1alpha1.Gadget]("dimming", fsm.Lifecycle).
			Initial(Working).
			State(Working, keep, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final())
	}
}

// renamedLamp sets a lamp, then changes the gadget without changing the
// lamp's target, and awaits the lamp lit at its target after each.
func renamedLamp(e *fsmtest.Env) {
	g := gadget()
	g.Spec.Target = 3
	lit := func() bool {
		lamps.Lock()
		defer lamps.Unlock()
		return lamps.level[e.Namespace+"/"+g.Name] == 3
	}
	e.Create(g)
	e.AwaitReady(g)
	e.Await("the lamp lit", lit)
	e.Update(g, func() { g.Spec.Mode = "evening" })
	e.AwaitReady(g)
	e.Await("the lamp lit again", lit)
	e.Delete(g)
	e.AwaitGone(g)
}
