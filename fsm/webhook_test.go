package fsm_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestWebhookConfigurationsNameTheMachinesPathsAndFailClosed(t *testing.T) {
	res := schema.GroupVersionResource{Group: "testing.kfsm.dev", Version: "v1alpha1", Resource: "gadgets"}
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ops", Name: "gadget-webhooks"}}

	m := appMachine("plain")
	validating, mutating := m.WebhookConfigurations(res, svc)
	if mutating != nil {
		t.Errorf("a machine without Default has a mutating configuration: %+v", mutating)
	}
	hook := validating.Webhooks[0]
	if got := ptr.Deref(hook.ClientConfig.Service.Path, ""); got != "/kfsm/validate/plain" || got != m.ValidatePath() {
		t.Errorf("the validating webhook is at %q, want %s", got, m.ValidatePath())
	}
	if svc.Service.Path != nil {
		t.Error("WebhookConfigurations changed the client configuration it was given")
	}
	if *hook.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failure policy %s, want Fail", *hook.FailurePolicy)
	}
	wantRule := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"testing.kfsm.dev"}, APIVersions: []string{"v1alpha1"},
			Resources: []string{"gadgets", "gadgets/status"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
	}
	if diff := cmp.Diff([]admissionregistrationv1.RuleWithOperations{wantRule}, hook.Rules); diff != "" {
		t.Errorf("rules without ValidateDelete (-want +got):\n%s", diff)
	}

	guarded := appMachine("guarded").Admission(fsm.Admission[*v1alpha1.Gadget]{
		Default:        func(context.Context, *v1alpha1.Gadget) error { return nil },
		ValidateDelete: func(context.Context, *v1alpha1.Gadget) error { return nil },
	})
	url := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/")}
	validating, mutating = guarded.WebhookConfigurations(res, url)
	if got := validating.Webhooks[0].Rules[0].Operations; !cmp.Equal(got, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("with ValidateDelete the validating webhook sees %v, want deletes too", got)
	}
	if mutating == nil {
		t.Fatal("a machine with Default has no mutating configuration")
	}
	m0 := mutating.Webhooks[0]
	if got := ptr.Deref(m0.ClientConfig.URL, ""); got != "https://127.0.0.1:9443/kfsm/default/guarded" {
		t.Errorf("the defaulting webhook is at %q", got)
	}
	if got := m0.Rules[0]; !cmp.Equal(got.Operations, wantRule.Operations) || !cmp.Equal(got.Resources, []string{"gadgets"}) {
		t.Errorf("the defaulting webhook sees %v of %v, want creates and updates of gadgets", got.Operations, got.Resources)
	}
}

// Every replica of an operator serves its webhooks, the API server calls
// whichever a Service picks, and only one replica leads. With the fence on
// leader election and the default Admission.Operators (the operator's own
// identity, learnt from the API server), no status write of the leader is
// refused, by a replica that leads or one that does not, over at least
// twenty seconds and forty status writes (about ten a second on a quiet
// machine) and across a hand-over of the leadership, as in a rolling
// update.
func TestFencedReplicasWebhooksNeverRefuseTheLeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	serving, err := cluster.NewWebhookServing()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serving.Close() })
	lb := newBalancer(t, serving)

	// The replicas act as a ServiceAccount of their own, so that the
	// status guard tells them from the test.
	user := "system:serviceaccount:" + e.namespace + ":operator"
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kfsm-fenced-webhooks-" + e.namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if err := e.direct.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.direct.Delete(context.Background(), binding) })

	machine := func() *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("fenced-hooks", fsm.Lifecycle).
			Initial("Counting").
			State("Counting", func(_ context.Context, r *request) fsm.Result {
				r.Object.Status.Count++ // a status write on every run
				return fsm.Wait(200*time.Millisecond, "Counting")
			}, fsm.To("Counting"))
	}
	var refused atomic.Int64
	var refusals sync.Map // one message of each kind, for the failure
	start := func(id string) (stop func()) {
		cfg := e.fe.Config()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
		cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				resp, err := next.RoundTrip(req)
				// Refused by the API server: a conflict is no refusal.
				if req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/status") && err == nil &&
					resp.StatusCode >= 400 && resp.StatusCode != http.StatusConflict && resp.StatusCode != http.StatusNotFound {
					refused.Add(1)
					refusals.Store(resp.Status, id)
				}
				return resp, err
			})
		})
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		opts := manager.Options{
			Scheme:                        e.fe.Scheme,
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress:        "0",
			Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{e.namespace: {}}},
			Controller:                    config.Controller{SkipNameValidation: ptr.To(true)},
			LeaderElection:                true,
			LeaderElectionID:              "fenced-hooks",
			LeaderElectionNamespace:       e.namespace,
			LeaderElectionReleaseOnCancel: true,
			LeaseDuration:                 ptr.To(4 * time.Second),
			RenewDeadline:                 ptr.To(3 * time.Second),
			RetryPeriod:                   ptr.To(500 * time.Millisecond),
			WebhookServer:                 webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: serving.ServerOptions().CertDir}),
		}
		if err := fsm.FenceLeaderElection(cfg, &opts, id); err != nil {
			t.Fatal(err)
		}
		mgr, err := manager.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		m := machine()
		if err := m.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		if err := m.SetupWebhookWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(runCtx) }()
		b := lb.add(id, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return func() {
			lb.remove(b) // as a Service drops a terminating Pod
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %s stopped: %v", id, err)
			}
		}
	}
	stopA := start("a")
	stopB := start("b")
	t.Cleanup(func() { stopB() })

	validating, _ := machine().WebhookConfigurations(
		schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "gadgets"},
		serving.ClientConfig())
	validating.Name += "-" + e.namespace
	validating.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: e.namespace}}
	if err := e.direct.Create(ctx, validating); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.direct.Delete(context.Background(), validating) })

	// The webhooks are on once the test's own status write is refused.
	e.gadget("probe", v1alpha1.GadgetSpec{})
	awaitFor(t, "the status guard to refuse the test's status write", func() bool {
		g := e.get("probe")
		g.Status.State = "Forged"
		return apierrors.IsForbidden(e.direct.Status().Update(ctx, g))
	})
	refused.Store(0)
	refusals.Clear()
	served := lb.served()

	for _, name := range []string{"g1", "g2"} {
		e.gadget(name, v1alpha1.GadgetSpec{})
	}
	count := func() int32 { return e.get("g1").Status.Count + e.get("g2").Status.Count }
	holder := func() string {
		var l coordinationv1.Lease
		if err := e.direct.Get(ctx, client.ObjectKey{Namespace: e.namespace, Name: "fenced-hooks"}, &l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	// At least 20 writes and at least 10 s under the first leader: a
	// loaded machine takes longer for the writes, not fewer of them.
	watchWrites := func(what string, atLeast int32) {
		t.Helper()
		began := time.Now()
		awaitFor(t, what, func() bool { return count() >= atLeast })
		time.Sleep(time.Until(began.Add(10 * time.Second)))
	}
	watchWrites("20 status writes", 20)
	leader, before := holder(), count()

	// The leader goes, a new replica comes, the other leads.
	stopLeader, newID := stopA, "c"
	if leader == "b" {
		stopLeader = stopB
		stopB = stopA
	}
	stopLeader()
	stopC := start(newID)
	t.Cleanup(stopC)
	awaitFor(t, "another replica to lead", func() bool { h := holder(); return h != "" && h != leader })
	watchWrites("20 status writes after the hand-over", before+20)

	if n := refused.Load(); n != 0 {
		var kinds []string
		refusals.Range(func(k, v any) bool { kinds = append(kinds, fmt.Sprintf("%v (replica %v)", k, v)); return true })
		t.Errorf("%d status writes of the operator refused: %s", n, strings.Join(kinds, "; "))
	}
	for id, n := range lb.served() {
		t.Logf("replica %s answered %d admission requests", id, n-served[id])
	}
	if got := lb.served(); got["a"]-served["a"] == 0 || got["b"]-served["b"] == 0 {
		t.Errorf("admission requests answered by replica: %v, want both a and b to answer", got)
	}
}

// An operator that cannot learn its own identity says so loudly and lets
// status writes through, with a warning to the writer, rather than refuse
// its own: every write of its status would be refused, and no object
// would move.
func TestAnUnknownOperatorIdentityIsLoudAndRefusesNoStatusWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logMu sync.Mutex
	var logged []string
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logged = append(logged, prefix+" "+args)
	}, funcr.Options{})
	noReviews := func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, opts)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if _, ok := obj.(*authenticationv1.SelfSubjectReview); ok {
					return apierrors.NewServiceUnavailable("the authenticator is down")
				}
				return c.Create(ctx, obj, opts...)
			},
		}), nil
	}
	m := fsm.New[*gadget]("unknown-operator", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(context.Context, *request) fsm.Result { return fsm.Next("End") }, fsm.To("End")).
		State("End", done, fsm.Final())
	fsmtest.Run(e.fe, m, fsmtest.WithWebhooks(), fsmtest.WithManagerOptions(func(o *manager.Options) {
		o.NewClient, o.Logger = noReviews, log
	}))

	g := e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.AwaitReady(g)

	var warnings warningLog
	cfg := e.fe.Config()
	cfg.WarningHandler = &warnings
	c, err := client.New(cfg, client.Options{Scheme: e.fe.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	forged := e.get("g")
	forged.Status.State = "Start"
	if err := c.Status().Update(t.Context(), forged); err != nil {
		t.Errorf("a status write while the operator is unknown: %v, want it let through", err)
	}
	if got := warnings.all(); len(got) == 0 || !strings.Contains(got[0], "status writes are not checked") {
		t.Errorf("warnings %q, want one saying that status writes are not checked", got)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !slices.ContainsFunc(logged, func(l string) bool {
		return strings.Contains(l, "the status guard lets every status write through") && strings.Contains(l, "the authenticator is down")
	}) {
		t.Errorf("no error log says that the status guard is off, and why; logged:\n%s", strings.Join(logged, "\n"))
	}
}

// warningLog keeps the warnings that the API server sends a client.
type warningLog struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

// balancer is to the API server what a Service in front of the operator's
// replicas is: it sends each admission request to the next replica that
// serves, and counts what each answered.
type balancer struct {
	t     *testing.T
	proxy *http.Transport

	mu       sync.Mutex
	backends []*backend // those that serve
	all      []*backend
	next     int
}

type backend struct {
	id, addr string
	answered atomic.Int64
}

// newBalancer serves at serving's address, with its certificate.
func newBalancer(t *testing.T, serving *cluster.WebhookServing) *balancer {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(serving.ClientConfig().CABundle)
	b := &balancer{t: t, proxy: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	dir, opts := serving.ServerOptions().CertDir, serving.ServerOptions()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); b.proxy.CloseIdleConnections() })
	return b
}

func (b *balancer) add(id, addr string) *backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	be := &backend{id: id, addr: addr}
	b.backends = append(b.backends, be)
	b.all = append(b.all, be)
	return be
}

func (b *balancer) remove(be *backend) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = slices.DeleteFunc(b.backends, func(x *backend) bool { return x == be })
}

func (b *balancer) served() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int64{}
	for _, be := range b.all {
		out[be.id] = be.answered.Load()
	}
	return out
}

// ServeHTTP tries the replicas in turn, from the next one, until one
// answers: a replica that is starting does not serve yet.
func (b *balancer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	order := slices.Clone(b.backends)
	first := b.next
	b.next++
	b.mu.Unlock()
	for i := range order {
		be := order[(first+i)%len(order)]
		out, err := http.NewRequestWithContext(req.Context(), req.Method, "https://"+be.addr+req.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			continue
		}
		out.Header = req.Header.Clone()
		resp, err := b.proxy.RoundTrip(out)
		if err != nil {
			continue
		}
		be.answered.Add(1)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		_ = resp.Body.Close()
		return
	}
	http.Error(w, "no replica serves", http.StatusServiceUnavailable)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// awaitFor polls cond for up to a minute, for tests that run managers of
// their own, without fsmtest's operator.
func awaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
