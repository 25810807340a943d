package graph_test

import (
	"fmt"
	"time"

	"github.com/kfsm/kfsm/graph"
)

func ExampleGraph_Validate() {
	g := &graph.Graph{Name: "door", States: []graph.StateSpec{
		{Name: "Closed", Initial: true, Exits: []graph.State{"Open", "Locked"}},
		{Name: "Open", Exits: []graph.State{"Closed"}},
		{Name: "Jammed"},
	}}
	fmt.Println(g.Validate())
	// Output:
	// state graph "door" has 3 problems
	//   - state Closed has an exit to Locked, which is not declared
	//   - state Jammed is not final and has no exit: objects would stay there for ever
	//   - state Jammed cannot be reached from the initial state Closed
}

func ExampleGraph_Mermaid() {
	g := &graph.Graph{Name: "job", Mode: graph.Pipeline, States: []graph.StateSpec{
		{Name: "Queued", Initial: true, Exits: []graph.State{"Running"}},
		{Name: "Running", Exits: []graph.State{"Done"}, Timeout: &graph.Timeout{After: time.Hour, To: "TimedOut"}},
		{Name: "Done", Final: true},
		{Name: "TimedOut", Final: true},
	}}
	fmt.Print(g.Mermaid())
	// Output:
	// stateDiagram-v2
	//     direction LR
	//     state "Queued" as s0
	//     state "Running" as s1
	//     state "Done" as s2
	//     state "TimedOut" as s3
	//     [*] --> s0
	//     s0 --> s1
	//     s1 --> s2
	//     s1 --> s3: timeout 1h
	//     s2 --> [*]
	//     s3 --> [*]
}

func ExampleGraph_Check() {
	g := &graph.Graph{Name: "job", States: []graph.StateSpec{
		{Name: "Queued", Initial: true, Exits: []graph.State{"Running"}},
		{Name: "Running", Exits: []graph.State{"Succeeded", "Parked"}},
		{Name: "Parked", Exits: []graph.State{"Unparked"}},
		{Name: "Unparked", Exits: []graph.State{"Parked"}},
		{Name: "Succeeded", Final: true},
	}}
	for _, f := range g.Check() {
		fmt.Printf("%s: %s\n  %s\n", f.Code, f.Detail, f.Walk())
	}
	// Output:
	// Trap: states Parked, Unparked are a trap: objects can finish, in Succeeded, but an object that reaches them never does: no walk from there leads to a final state
	//   Queued -> Running -> Parked, then for ever: Parked -> Unparked -> Parked
}
