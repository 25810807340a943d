package fsm_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Door is the tutorial's resource, generated with controller-gen in the
// test API like an operator author's type would be: its status embeds
// fsm.Status, and FSMStatus returns it.
type Door = v1alpha1.Door

// tutorial is the README's tutorial, word for word (a test checks it): a
// door that opens when its spec asks and closes by itself after a minute.
// ExampleNew draws it, and a test runs it under a manager.
func tutorial() *fsm.Machine[*Door] {
	m := fsm.New[*Door]("door", fsm.Lifecycle).
		Initial("Closed").
		State("Closed", func(ctx context.Context, r *fsm.Request[*Door]) fsm.Result {
			if r.Object.Spec.Open {
				r.Object.Status.Opened++ // written with kfsm's status
				return fsm.Next("Open")
			}
			return fsm.Done() // converged: Ready=True
		}, fsm.To("Open")).
		State("Open", func(ctx context.Context, r *fsm.Request[*Door]) fsm.Result {
			if !r.Object.Spec.Open {
				return fsm.Next("Closed")
			}
			return fsm.Wait(0, "HeldOpen") // until the spec changes, or a minute passes
		}, fsm.To("Closed"), fsm.Timeout(time.Minute, "Closed")).
		OnDelete("Removed").
		State("Removed", nil, fsm.Final())
	return m
}

// The README's door, drawn. In an operator, m.SetupWithManager(mgr) runs
// it; see tutorial for its code.
func ExampleNew() {
	m := tutorial()
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
