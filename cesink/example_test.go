package cesink_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kfsm/kfsm/cesink"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// An operator's main sends the transitions of its machine to a broker.
func Example_operator() {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget("http://broker.example/"))
	if err != nil {
		panic(err)
	}
	m := relay()
	m.Observe(cesink.New(m, events, cesink.Source("//cluster-a/kfsm/relay")))
	if err := m.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}

// The event of one transition, as a receiver gets it. kfsm calls the
// observer for each transition once its status is written; here it is
// called by hand.
func ExampleNew() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	protocol, err := cloudevents.NewHTTP()
	if err != nil {
		panic(err)
	}
	receive, err := cloudevents.NewHTTPReceiveHandler(ctx, protocol, func(e cloudevents.Event) {
		fmt.Println("specversion:", e.SpecVersion())
		fmt.Println("id:", e.ID())
		fmt.Println("source:", e.Source())
		fmt.Println("type:", e.Type())
		fmt.Println("subject:", e.Subject())
		fmt.Println("time:", e.Time().Format(time.RFC3339Nano))
		fmt.Println("datacontenttype:", e.DataContentType())
		fmt.Println("data:", string(e.Data()))
	})
	if err != nil {
		panic(err)
	}
	receiver := httptest.NewServer(receive)
	defer receiver.Close()

	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(receiver.URL))
	if err != nil {
		panic(err)
	}
	m := relay()
	observe := cesink.New(m, events).Transition
	m.Observe(fsm.Observers[*v1alpha1.Gadget]{Transition: observe})

	// What kfsm gives the observer: the object, with its kind.
	g := &v1alpha1.Gadget{TypeMeta: metav1.TypeMeta{APIVersion: "testing.kfsm.dev/v1alpha1", Kind: "Gadget"}, ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "front", UID: "0b9a2c4e-5d1f-4f7a-9c3e-2a6b8d0e1f23"}}
	at := time.Date(2030, 1, 1, 12, 0, 0, 250_000_000, time.UTC)
	observe(ctx, g, fsm.Transition{From: Queued, To: Working, Reason: fsm.ReasonNext, Time: metav1.NewTime(at)})
	// Output:
	// specversion: 1.0
	// id: 57c039eeb8fe6dd8bb79f5821ea3a510
	// source: kfsm/relay
	// type: dev.kfsm.transition
	// subject: shop/front
	// time: 2030-01-01T12:00:00.25Z
	// datacontenttype: application/json
	// data: {"machine":"relay","object":{"group":"testing.kfsm.dev","version":"v1alpha1","kind":"Gadget","namespace":"shop","name":"front","uid":"0b9a2c4e-5d1f-4f7a-9c3e-2a6b8d0e1f23"},"from":"Queued","to":"Working","reason":"Next"}
}
