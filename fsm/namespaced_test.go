package fsm_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// refusals records the requests that the API server refused.
type refusals struct {
	mu   sync.Mutex
	seen []string
}

func (r *refusals) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusForbidden {
			r.mu.Lock()
			r.seen = append(r.seen, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
		}
		return resp, err
	})
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// namespaceOperator binds a Role in fe's namespace, and nothing outside
// it, to a user, as an operator installed to watch one namespace has
// (OLM's OwnNamespace, a chart's watchNamespace), and returns a
// configuration that acts as that user and notes what is refused.
func namespaceOperator(t *testing.T, fe *fsmtest.Env) (*rest.Config, *refusals) {
	t.Helper()
	user := "operator-of-" + fe.Namespace
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	fe.Create(&rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "operator"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"gadgets", "gadgets/status"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: all},
			{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: all},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: all},
		},
	})
	fe.Create(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "operator"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "operator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	})
	cfg := fe.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	r := &refusals{}
	cfg.Wrap(r.wrap)
	return cfg, r
}

// An operator confined to one namespace, by its cache and by a Role
// there, makes no request that the Role refuses and reconciles its
// objects: the check of its cache against the API server, which a
// leader makes when it begins and a replica when it takes slots, lists
// that namespace alone. Listing every namespace, the replica never
// reconciled the slots it took, and the leader went without the check.
func TestUnderManagerAnOperatorOfOneNamespaceNeedsNoRoleBeyondIt(t *testing.T) {
	t.Parallel()
	machine := func(shards *sharding.Shards) *fsm.Machine[*gadget] {
		m := fsm.New[*gadget]("confined", fsm.Pipeline).
			Initial("Counted").
			State("Counted", func(_ context.Context, r *request) fsm.Result {
				r.Object.Status.Count = r.Object.Spec.Target
				return fsm.Done()
			}, fsm.To("Done")).
			State("Done", nil, fsm.Final()).
			PublishGraph(false)
		if shards != nil {
			m = m.Sharded(shards)
		}
		return m
	}
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "Leader", true: "Sharded"}[sharded], func(t *testing.T) {
			t.Parallel()
			fe := fsmtest.New(t)
			cfg, refused := namespaceOperator(t, fe)
			if sharded {
				startReplicaAs(t, fe, cfg, "a", machine)
			} else {
				startManagerAs(t, fe, cfg, machine(nil))
			}
			g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: v1alpha1.GadgetSpec{Target: 3}}
			fe.Create(g)
			await(t, "the gadget to be counted", func() bool {
				if err := fe.Client.Get(t.Context(), client.ObjectKeyFromObject(g), g); err != nil {
					t.Fatal(err)
				}
				return g.Status.Count == 3
			})
			if r := refused.list(); len(r) > 0 {
				t.Errorf("the API server refused %d request(s) of the operator, which its Role in %s does not allow: %v", len(r), fe.Namespace, r)
			}
		})
	}
}

// startManagerAs runs a manager with m on the objects of fe's namespace,
// with LeanCache, acting as cfg says, until the test ends.
func startManagerAs(t *testing.T, fe *fsmtest.Env, cfg *rest.Config, m *fsm.Machine[*gadget]) {
	t.Helper()
	opts := manager.Options{
		Scheme:     fe.Client.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{fe.Namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	fsm.LeanCache(&opts) // as kfsm init makes a manager; it tells kfsm what the cache watches
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
