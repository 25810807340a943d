// Package fsmvet finds, before the code runs, the transitions that kfsm
// would refuse at run time.
//
// Go's types cannot check the edges between states that are names, but
// the edges are in the code for an analyzer to read: a machine is
// declared in one expression,
//
//	fsm.New[*v1.Moose]("moose", fsm.Lifecycle).
//		Initial(Tagged).
//		State(Tagged, h.tag, fsm.To(Roaming)).
//		State(Roaming, h.roam, fsm.To(Eating), fsm.Timeout(30*time.Minute, Lost)).
//		...
//
// and handlers return fsm.Next with constant states. [Analyzer] reads
// both and reports, at the line of the Next:
//
//   - a Next to a state that is not among the exits of the state whose
//     handler returns it, with the fsm.To to declare:
//
//     moose.go:119:9: state Eating asks to move to Roaming, which is not
//     among its exits [Sleeping]; kfsm refuses the transition at run time:
//     to allow it, declare fsm.To(Sleeping, Roaming) at moose.go:80
//
//     or, for a Next to the deletion state from outside the deletion path,
//     that deleting the object is what starts the path:
//
//     moose.go:104:10: state Roaming asks to move to Released, which is
//     not among its exits [Eating]; kfsm refuses the transition at run
//     time: to enter the deletion path, delete the object, and kfsm moves
//     it to Released by itself
//
//   - a Next to a state that the machine does not declare at all, with the
//     closest declared name:
//
//     moose.go:95:9: state Tagged asks to move to Roamin, but no state
//     Roamin is declared (did you mean Roaming?); its exits are [Roaming]
//
//   - a Next in a handler that serves several states, legal from one and
//     not from another (a Next under a test of r.State counts only for the
//     states that the test lets through):
//
//     build.go:37:10: state Fetch asks to move to Done, which is not among
//     its exits [Compile]; its handler o.step also serves state Compile,
//     where the move is legal: branch on r.State, or to allow it, declare
//     fsm.To(Compile, Done) at build.go:30
//
// It reports, at the machine's fsm.New, a change of the graph that would
// strand objects in a cluster: a state of a released version that the
// machine no longer declares, with no migration
// ([github.com/kfsm/kfsm/fsm.Machine.Version]) to move its objects. The
// released graphs are in the machine's lock file, NAME.graph.lock.json in
// the directory of the package that declares it, which the project's
// make generate writes (see [graph.Lock]); the newest graph of a lock
// marked unreleased, which no release has shipped, is not checked. A
// machine declared in a test file is not checked: a test may keep an
// earlier release's machine, to run the migration from it.
//
// For example:
//
//	moose.go:76:9: machine moose strands the objects of state Sleeping of
//	version 1: no migration says where they go; declare one, such as
//	Machine.Version(2, fsm.Rename("Sleeping", ...)), or with fsm.Remove,
//	fsm.Merge or fsm.Split; or, if no release has shipped version 1, mark
//	the lock "unreleased": true, and its graph may change freely until it
//	is released (the graphs released are in moose.graph.lock.json)
//
// It warns about code that can never run:
//
//   - a state that nothing moves to: no handler returns a Next that takes
//     it, and it is not the initial state, the deletion state or the
//     target of a timeout or retries edge;
//   - an exit that the state's handler never takes;
//   - a machine with a lock file that it cannot check the machine
//     against: its states or versions are not all constant, or are
//     declared outside the package.
//
// Several events in one Next take the exit declared first among them, and
// Default the last exit, as at run time: with fsm.To(Eating, Sleeping),
// Next(Sleeping, Eating) takes Eating and never Sleeping. The run-time
// refusal (a Stalled condition with reason IllegalTransition) gives the
// same reason in the same words.
//
// # Machines kept from an earlier release
//
// A project keeps its last release's machine in a test file, to run the
// migration from it (docs/upgrades.md, and the web app example's
// VersionOne). The analyzer knows such a machine as a machine declared in
// a test file with the name of one that the package's other files declare
// at a later version, and it checks the kept machine as what it is: the
// old graph, running the current code's handlers where it shares them.
//
//   - The current code is checked against the current machine: what the
//     kept machine allows makes nothing legal there, and no finding of the
//     kept machine lands on a line of the package's code.
//
//   - A Next of the current code that the kept machine refuses is a
//     warning ([KeptVersion]), at the handler of the kept state in the test
//     file. The refusal is real: the kept machine would stop an object
//     that the test moves through that state, with IllegalTransition. But
//     it is the test's, not the release's, and it matters only if the
//     test moves objects through the state. Where the current version's
//     migrations move the objects of one of the state's exits to the
//     Next's target, as a rename does, the warning names that exit, for a
//     handler of the test's to return, as the kept release's did:
//
//     server_test.go:20:23: warning: machine server as kept at version 1
//     refuses a Next of version 2's code at server.go:44: state
//     Provisioning asks to move to Starting, but no state Starting is
//     declared; its exits are [Booting]; version 2 moves the objects of
//     Booting to Starting: a handler of the test's that returns
//     Next(booting) takes that exit, as version 1's did
//
//   - The test's own handlers are checked against the kept machine, as
//     any code: a Next there that it refuses is an error, at its line.
//
//   - Dead states and unused exits are not reported in a kept machine:
//     its graph is the release's, which the test must not change.
//
// A test's machine that is no earlier version is checked as any machine;
// what it refuses of the package's code is reported at the handler that
// it registers, in the test file.
//
// # Running it
//
// kfsm vet runs the analyzer on packages, test files included:
//
//	kfsm vet ./...
//
// It prints one line per finding, warnings marked as such, and exits with
// status 1 when it finds an error; warnings alone do not fail it, and
// --warnings=false leaves them out.
//
// Under go vet, the analyzer is the kfsm-vet command, a small program of
// the analyzer alone:
//
//	go install github.com/kfsm/kfsm/cmd/kfsm-vet@latest
//	go vet -vettool=$(which kfsm-vet) ./...
//	go vet -vettool=$(which kfsm-vet) -kfsm.warnings=false ./...
//
// go vet starts its tool once for each package it vets and each package
// that those import, a thousand or so for an operator: kfsm-vet starts in
// about 13 ms of CPU, and the kfsm command, which answers go vet too, in
// about 140 ms, most of it its dashboard's layout engine. Under go vet
// every finding fails the run, warnings included.
//
// # golangci-lint
//
// Package [github.com/kfsm/kfsm/fsmvet/golangci] makes the analyzer a
// module plugin of golangci-lint v2, named kfsm. Build a golangci-lint
// binary that has it with golangci-lint custom and a .custom-gcl.yml (the
// version is golangci-lint's, and kfsm's is the one your operator uses):
//
//	version: v2.15.0
//	plugins:
//	  - module: github.com/kfsm/kfsm
//	    import: github.com/kfsm/kfsm/fsmvet/golangci
//	    version: v0.1.0
//
// then enable it in .golangci.yml and run the binary that custom made
// (./custom-gcl run ./... by default):
//
//	version: "2"
//	linters:
//	  enable:
//	    - kfsm
//	  settings:
//	    custom:
//	      kfsm:
//	        type: module
//	        description: Transitions that kfsm would refuse, found before the code runs.
//	        settings:
//	          warnings: true
//
// golangci-lint reports warnings like errors; set warnings to false to
// leave them out. A checkout of kfsm works as well: path: /path/to/kfsm
// instead of version.
//
// # Guarantees
//
//   - No false report: whatever the analyzer cannot resolve, it skips. A
//     Next whose state is computed at run time (Next(r.NextHop), a
//     variable, events collected in a slice) is not checked, and it makes
//     the analyzer assume that every exit of its state may be taken.
//   - Handlers are found as functions, method values (h.roam), function
//     literals, variables and parameters that hold one, and functions that
//     make one; results as they flow through the handler's variables and
//     through the package's functions that return them.
//   - A machine is followed through variables, fields, parameters and
//     results across the package's functions, so that a machine built by
//     helpers is checked as a whole.
//   - A handler that several machines register is checked against each
//     of them, with its own states: what one machine allows makes nothing
//     legal in another.
//   - A state may be declared more than once on a machine, one way or
//     another as a flag says, with a handler that branches on the same
//     flag. Each declaration is one possibility: a Next is reported, once
//     for each declaration, only when every declaration of its state on
//     the machine that may run the handler refuses it. A declaration whose
//     name, handler, exits or machine the analysis cannot read may allow
//     anything.
//
// # Assumptions
//
//   - A machine's states are declared in the package that calls fsm.New,
//     or in kfsm's own packages. A machine passed to a function outside
//     both may gain states there: the analyzer then no longer says that a
//     state is not declared, nor that one is dead.
//   - Every branch of a handler may run, except where a test of r.State
//     (==, !=, a switch, an early return) rules out the state.
//
// # Caveats
//
//   - Only constant targets are checked; the others are caught at run time
//     ([github.com/kfsm/kfsm/fsm] refuses them with IllegalTransition), and
//     fsmtest's edge coverage shows the edges that no test took.
//   - The graph itself (unknown targets of fsm.To, unreachable states, a
//     cycle in a pipeline) is Build's to check, when the machine is built.
//   - A Next that one declaration of its state allows is not checked
//     against the state's other declarations, even when the handler
//     returns it under another: the analyzer does not follow the flag.
//   - A handler that tests r.State in a way the analyzer does not follow
//     (through a variable, a function) is checked for what is illegal from
//     every state it serves.
package fsmvet
