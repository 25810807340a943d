package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kfsm/kfsm/fsm"
)

// App is the examples' application resource: a desired state, and
// whether to expose it with a Service.
type App struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AppSpec   `json:"spec,omitempty"`
	Status            AppStatus `json:"status,omitempty"`
}

type AppSpec struct {
	DesiredState fsm.State `json:"desiredState,omitempty"`
	Exposed      bool      `json:"exposed,omitempty"`
}

type AppStatus struct {
	fsm.Status `json:",inline"`
}

func (a *App) FSMStatus() *fsm.Status { return &a.Status.Status }

func (a *App) DeepCopyObject() runtime.Object {
	c := *a
	a.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	a.Status.Status.DeepCopyInto(&c.Status.Status)
	return &c
}

// runApp stores app on an in-memory client and returns a function that
// applies a change to it, reconciles it with machine m, and returns it as
// stored.
func runApp(m *fsm.Machine[*App], app *App) func(change func(*App)) *App {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	s.AddKnownTypeWithName(metav1.SchemeGroupVersion.WithKind("App").GroupKind().WithVersion("v1"), &App{})
	c := fake.NewClientBuilder().WithScheme(s).WithRESTMapper(testrestmapper.TestOnlyStaticRESTMapper(s)).
		WithObjects(app).WithStatusSubresource(app).Build()
	r, err := m.Reconciler(c, &events.FakeRecorder{})
	if err != nil {
		panic(err)
	}
	key := client.ObjectKeyFromObject(app)
	return func(change func(*App)) *App {
		ctx := context.Background()
		got := &App{}
		_ = c.Get(ctx, key, got)
		if change != nil {
			change(got)
			_ = c.Update(ctx, got)
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			panic(err)
		}
		_ = c.Get(ctx, key, got)
		return got
	}
}

// A machine with a goal walks the shortest path of declared exits towards
// the state that the spec asks for, one handler at a time, and stays
// there. A goal that no path leads to stalls the object with the reason.
func ExampleMachine_Goal() {
	toward := func(_ context.Context, r *fsm.Request[*App]) fsm.Result {
		if r.NextHop != "" {
			return fsm.Next(r.NextHop)
		}
		return fsm.Done() // at the goal
	}
	m := fsm.New[*App]("app", fsm.Lifecycle).
		Initial("Start").
		State("Start", toward, fsm.To("Running")).
		State("Running", toward, fsm.To("Servicing", "Stopping")).
		State("Servicing", toward, fsm.To("Running", "End")).
		State("Stopping", toward, fsm.To("End")).
		State("End", nil, fsm.Final()).
		Goal(func(a *App) fsm.State { return a.Spec.DesiredState })

	reconcile := runApp(m, &App{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"}, Spec: AppSpec{DesiredState: "Servicing"}})
	app := reconcile(nil)
	for _, t := range app.Status.History {
		fmt.Printf("%s → %s\n", t.From, t.To)
	}

	app = reconcile(func(a *App) { a.Spec.DesiredState = "Start" })
	fmt.Println(meta.FindStatusCondition(app.Status.Conditions, fsm.ConditionStalled).Message)

	// The same answer, for an admission webhook.
	fmt.Println(m.CheckGoal("Stopping", "Running"))
	// Output:
	//  → Start
	// Start → Running
	// Running → Servicing
	// no path leads from state Servicing to goal Start through the declared exits; from Servicing the machine can reach only Running, Stopping, End
	// no path leads from state Stopping to goal Running through the declared exits; from Stopping the machine can reach only End
}

// Given several events, Next takes the exit declared first among them; the
// Default event takes the last exit.
func ExampleNext() {
	var events []fsm.State
	m := fsm.New[*App]("events", fsm.Lifecycle).
		Initial("Running").
		State("Running", func(context.Context, *fsm.Request[*App]) fsm.Result {
			return fsm.Next(events[0], events[1:]...)
		}, fsm.To("Servicing", "Stopping")).
		State("Servicing", nil, fsm.Final()).
		State("Stopping", nil, fsm.Final())

	for _, raised := range [][]fsm.State{{"Stopping", "Servicing"}, {fsm.Default}} {
		events = raised
		app := runApp(m, &App{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}})(nil)
		fmt.Println(raised, "→", app.Status.State)
	}
	// Output:
	// [Stopping Servicing] → Servicing
	// [(default)] → Stopping
}

// A pipeline applies its children on every pass; once a pass reaches its
// final state, the children it did not apply are pruned.
func ExampleRequest_Apply() {
	m := fsm.New[*App]("web", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *fsm.Request[*App]) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name}, Data: map[string]string{"greeting": "hello"}}
			if err := r.Apply(ctx, cm); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next("Expose")
		}, fsm.To("Expose")).
		State("Expose", func(ctx context.Context, r *fsm.Request[*App]) fsm.Result {
			if r.Object.Spec.Exposed {
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
					Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
				}
				if err := r.Apply(ctx, svc); err != nil {
					return fsm.Fail(err)
				}
			}
			return fsm.Next("Serving")
		}, fsm.To("Serving")).
		State("Serving", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{})

	reconcile := runApp(m, &App{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default", UID: "1"}, Spec: AppSpec{Exposed: true}})
	fmt.Println(reconcile(nil).Status.Outputs)
	fmt.Println(reconcile(func(a *App) { a.Spec.Exposed = false }).Status.Outputs)
	// Output:
	// [ConfigMap default/shop Service default/shop]
	// [ConfigMap default/shop]
}

// A long task runs as an asynchronous action: the handler starts it,
// waits while it is pending, and moves on or fails once it is done. Its
// completion reconciles the object at once. The status records its intent
// before it starts and its outcome after, and the backup store tells
// whether a backup under the action's key exists: after a crash in the
// middle of it, kfsm asks that rather than take a second backup.
func ExampleRequest_Action() {
	store := map[string]string{} // stands for a backup store, by idempotency key
	backup := func(ctx context.Context, key, to string) error {
		if to == "" {
			return errors.New("no backup destination")
		}
		select { // stands for minutes of work
		case <-time.After(time.Minute):
			store[key] = to
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	taken := fsm.Observe(func(_ context.Context, run *fsm.ActionRun) (bool, error) {
		run.Result = store[run.Key]
		return run.Result != "", nil
	})
	m := fsm.New[*App]("db", fsm.Lifecycle).
		Initial("Running").
		State("Running", func(context.Context, *fsm.Request[*App]) fsm.Result { return fsm.Next("BackingUp") }, fsm.To("BackingUp")).
		State("BackingUp", func(_ context.Context, r *fsm.Request[*App]) fsm.Result {
			to := "backups/" + r.Object.Name // the action must not keep the request
			a := r.Action("backup", func(ctx context.Context, run *fsm.ActionRun) error {
				run.Result = to
				return backup(ctx, run.Key, to)
			}, taken, fsm.Deadline(time.Hour))
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "BackingUp")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err) // retried with backoff: the next attempt starts anew
			}
			r.Event("Normal", "BackedUp", "backup taken to "+a.Result)
			return fsm.Next("Running")
		}, fsm.To("Running")).
		Tune(fsm.Tuning{ActionLimit: 2})
	fmt.Println(m.Build())
	// Output: <nil>
}

// Objects that a machine reads but does not own, such as a Secret named in
// the spec, reconcile their readers through Watches and a mapping.
func ExampleMachine_Watches() {
	m := fsm.New[*App]("app", fsm.Lifecycle).
		Initial("Running").
		State("Running", func(ctx context.Context, r *fsm.Request[*App]) fsm.Result {
			var s corev1.Secret
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: r.Object.Name + "-credentials"}, &s); err != nil {
				return fsm.Wait(0, "WaitingForCredentials")
			}
			return fsm.Done()
		}, fsm.Final()).
		Watches(&corev1.Secret{}, func(_ context.Context, s client.Object) []ctrl.Request {
			name, found := cutSuffix(s.GetName(), "-credentials")
			if !found {
				return nil
			}
			return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: s.GetNamespace(), Name: name}}}
		})
	fmt.Println(m.Build())
	// Output: <nil>
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) < len(suffix) || s[len(s)-len(suffix):] != suffix {
		return s, false
	}
	return s[:len(s)-len(suffix)], true
}
