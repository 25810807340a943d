package fsm_test

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Door is the tutorial's resource. A real one is generated with
// controller-gen; the deepcopy below is what it would write.
type Door struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DoorSpec   `json:"spec,omitempty"`
	Status            DoorStatus `json:"status,omitempty"`
}

type DoorSpec struct {
	Open bool `json:"open,omitempty"`
}

type DoorStatus struct {
	fsm.Status `json:",inline"`
	Opened     int32 `json:"opened,omitempty"` // your own fields go here too
}

func (d *Door) FSMStatus() *fsm.Status { return &d.Status.Status }

func (d *Door) DeepCopyObject() runtime.Object {
	c := *d
	d.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	d.Status.Status.DeepCopyInto(&c.Status.Status)
	return &c
}

// A door that opens when its spec asks and closes by itself after a
// minute: the README's tutorial. In an operator, m.SetupWithManager(mgr)
// runs it.
func ExampleNew() {
	m := fsm.New[*Door]("door", fsm.Lifecycle).
		Initial("Closed").
		State("Closed", func(ctx context.Context, r *fsm.Request[*Door]) fsm.Result {
			if r.Object.Spec.Open {
				return fsm.Next("Open")
			}
			return fsm.Done() // converged: Ready=True
		}, fsm.To("Open")).
		State("Open", func(ctx context.Context, r *fsm.Request[*Door]) fsm.Result {
			if !r.Object.Spec.Open {
				return fsm.Next("Closed")
			}
			r.Object.Status.Opened++
			return fsm.Wait(0, "HeldOpen")
		}, fsm.To("Closed"), fsm.Timeout(time.Minute, "Closed")).
		OnDelete("Removed").
		State("Removed", nil, fsm.Final())
	if err := m.Build(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(m.Graph().Mermaid())
	// Output:
	// stateDiagram-v2
	//     direction LR
	//     state "Closed" as s0
	//     state "Open" as s1
	//     state "Removed" as s2
	//     [*] --> s0
	//     [*] --> s2: on delete
	//     s0 --> s1
	//     s1 --> s0
	//     s1 --> s0: timeout 1m
	//     s2 --> [*]
	//     classDef deletion fill:#e8e8e8,stroke-dasharray:4 4
	//     class s2 deletion
}

// Build lists every problem of a declaration at once.
func ExampleMachine_Build() {
	m := fsm.New[*v1alpha1.Gadget]("typo", fsm.Lifecycle).
		Initial("Start").
		State("Start", nil, fsm.To("Finsihed")).
		State("Finished", nil, fsm.Final())
	fmt.Println(m.Build())
	// Output:
	// state graph "typo" has 3 problems
	//   - state Start has an exit to Finsihed, which is not declared
	//   - state Finished cannot be reached from the initial state Start
	//   - state Start has no handler
}
