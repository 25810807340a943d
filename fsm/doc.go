// Package fsm runs Kubernetes operators as finite state machines on
// controller-runtime.
//
// # The model
//
// Declare the states of your resource as a graph, with one small handler
// per state, and register the machine with a manager:
//
//	m := fsm.New[*v1.Moose]("moose", fsm.Lifecycle).
//		Initial(Tagged).
//		State(Tagged, h.tag, fsm.To(Roaming)).
//		State(Roaming, h.roam, fsm.To(Eating), fsm.Timeout(30*time.Minute, Lost)).
//		State(Eating, h.eat, fsm.To(Roaming)).
//		State(Lost, nil, fsm.Final()).
//		OnDelete(Released).
//		State(Released, h.release, fsm.Final())
//	err := m.SetupWithManager(mgr)
//
// A handler gets a [Request] (the latest object, a client, a logger, the
// clock, where the object came from and how often it tried) and returns a
// [Result], one of five:
//
//   - [Next] moves to a declared exit and runs its handler at once;
//   - [Wait] stays and runs the handler again later or on the next change;
//   - [Done] says the object has converged here: it is Ready;
//   - [Fail] retries with backoff and counts the failure;
//   - [Stop] gives up until the spec changes: the object is Stalled.
//
// The object's type embeds [Status] in its status and returns it from one
// method, FSMStatus. kfsm keeps there the state, when it was entered, the
// conditions, the latest transitions and the failure count; handlers may
// change the rest of the status freely.
//
// # Two ways to run a graph
//
// A [Lifecycle] machine persists the current state and resumes there on
// every reconcile, also after a restart; cycles across reconciles are fine
// (Roaming, Eating, Roaming...). Within one reconcile a state runs at most
// once; a walk that comes back to a state it ran stops there and continues
// in the next reconcile, at once.
//
// A [Pipeline] machine starts from the initial state on every reconcile and
// walks until a handler waits, fails, stops or is done; its graph must be
// acyclic. Each state has a condition of its own name: True once passed in
// this pass, False with the handler's reason where the pass rests, and
// absent for states the pass did not reach. Choose it when the state can be
// derived from the world again each time.
//
// # Conditions
//
// Every machine sets Ready, Reconciling and Stalled as kstatus reads them,
// each stamped with the generation, and status.observedGeneration: kubectl
// wait --for=condition=Ready, Flux and Argo CD understand kfsm objects. The
// state itself is informational; conditions are the contract.
//
// # Seeing what happens
//
// Every transition adds an entry to Status.History (bounded; see
// [Machine.HistoryLimit]), records a Kubernetes event (events.k8s.io),
// writes a log line with the machine, object, states and reason, counts in
// the Prometheus metrics kfsm_transitions_total, kfsm_state_duration_seconds,
// kfsm_objects, kfsm_handler_errors_total and kfsm_stalled_objects
// (registered with controller-runtime's registry), and each reconcile is an
// OpenTelemetry span with a child span per handler. The graph can be drawn:
// see [Machine.Graph] and package graph.
//
// # Guarantees
//
//  1. Only declared exits are taken. A Next to any other state is refused:
//     the state stays, Ready is False and Stalled True with reason
//     IllegalTransition, and an event and an error log say what happened.
//  2. Build and SetupWithManager refuse an invalid graph and list every
//     problem at once (a *graph.ValidationError).
//  3. kfsm writes the status only when it changed, at most once per
//     reconcile. Reconciling an object that has converged makes no API write
//     and records no event.
//  4. status.observedGeneration and the Ready, Reconciling and Stalled
//     conditions follow the kstatus conventions.
//  5. After kfsm writes an object at resourceVersion R, it runs no handler
//     on a cached copy older than R; it waits for the cache instead.
//  6. Once an object is being deleted, the deletion path runs from the
//     OnDelete state, whatever state the object was in. The finalizer is
//     added before any handler runs and removed only when a final state of
//     the deletion path is done. A machine without OnDelete adds none.
//  7. Nothing is stuck silently: a Timeout edge moves an object that stays
//     too long, a RetriesThen edge moves one that fails too often; without
//     such an edge, exhausted Retries and Stop make the object Stalled,
//     with the reason and message, until its generation changes.
//  8. A panic in a handler is recovered and reported like Fail.
//  9. Every transition is visible, as described above.
//
// Conflicts with other writers are retried without an error log.
//
// # Assumptions
//
//   - Handlers are idempotent. kfsm may run a handler again: after a
//     failure, after a crash between the handler's work and the status
//     write, or after a restart.
//   - Handlers change only the object's status; other changes to the
//     object are not written. Other objects are theirs to change through
//     the request's client.
//   - Handlers use the request's Clock rather than time.Now, so that tests
//     can move time.
//   - Only kfsm writes the fields of Status.
//
// # Caveats
//
//   - A Wait without a delay runs the handler again only when the object
//     or something it watches changes.
//   - The metrics kfsm_objects and kfsm_stalled_objects count the objects
//     this process reconciled since it started.
//   - A persisted state that the graph no longer declares (a state was
//     renamed) is reported as Stalled with reason UnknownState and kept as
//     it is: kfsm does not guess where the object should be.
package fsm
