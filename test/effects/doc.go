// Package effects tests that kfsm's durable actions (fsm.Request.Action)
// make each external effect once, when the operator that runs them is
// killed at any point of an action's life: as separate processes, killed
// with SIGKILL, against a real service whose effects the test counts. It
// holds tests only.
//
// # How it tests
//
// The tests start a real API server with the test API's CRDs and the
// ShardedListAndWatch feature gate, and build the operator in
// internal/operator: one lifecycle machine over Gadgets, in which each
// gadget is an order. In state Charge, the handler runs the action
// "charge": its work posts the order to a payment service with the
// action's key as the Idempotency-Key and keeps the charge's id as the
// action's result. Once the action succeeded, the handler writes the id
// into status.note and moves to Charged. The action declares how an
// interrupted run resumes, by the operator's mode: keys (fsm.Idempotent),
// observe (fsm.Observe, which asks the service for the order's charges)
// or neither.
//
// The payment service is a real HTTP server on loopback, in the test. It
// makes a charge, an effect, as soon as a request arrives, and records
// it: by the time a killed process's request is answered, or not, the
// effect has happened. In mode keys it honours the Idempotency-Key: a
// charge under a key it has seen is the first one again. In modes observe
// and neither it does not, and every charge asked for is a new effect;
// in mode observe, its first answer to a question about an order's
// charges is an error, as from a service that cannot tell yet.
//
// A round works in a namespace of its own with a service of its own. It
// starts process a with a crash point, creates ten gadgets at once, and
// waits until a has died. The crash points are:
//
//   - before-intent: a kills itself just before it sends the first status
//     write that records an action's intent;
//   - after-intent: right after that write succeeded;
//   - before-effect: the service has a killed at the first charge, before
//     it makes it;
//   - after-effect: after it made it, before it answers;
//   - before-outcome: a kills itself in the work, once the service has
//     answered, before the work returns;
//   - sigkill: the test kills a at a random moment within 300 ms of the
//     first charge, while the service answers each charge after up to
//     200 ms.
//
// Once what a sent has reached the service, the round starts process b,
// without a crash point, and waits until every gadget rests.
//
// Two more points lose an answer rather than a process, in modes keys and
// observe: the service applies the first charge it receives and answers
// it 500 (lost-answer), or holds its answer until the caller gives up
// (timeout; the operator then runs with a request timeout of one
// second). The charge's work fails, the handler's Fail retries it, and
// process a, which lives on, finishes every charge. In mode neither
// there is nothing to compare: the work said the charge failed, and
// without a key the service honours or an Observe it is charged again.
//
// A handover round, in modes keys and observe, runs two replicas sharded
// as package scaleout runs them (sharding.New, LeaseDuration 4 s,
// RenewDeadline 3 s, RetryPeriod 1 s). Replica a starts alone and charges
// every order, while the service makes each charge and holds its answer.
// Then b joins, and a hands about half of the slots over: it cancels the
// charges of those gadgets, whose effects happened, and b finds their
// records without an outcome. The service then answers.
//
// Each gadget of a round is a run. -effects.rounds repeats the rounds
// (one of each mode and crash point by default, two at once; with
// -effects.rounds=6, over a thousand runs), and the test logs, by mode
// and crash point, the rounds, runs, effects, gadgets Charged and
// Stalled, and violations.
//
// # What the tests prove
//
// In modes keys and observe, every gadget is Charged, its order charged
// exactly once (after a lost answer too: the retry is asked for under the
// same key, or only after Observe found no charge), its status.note the charge's id (no outcome lost) and no
// action left in its status. In mode observe, kfsm asks again about an
// order whose first answer was an error, and charges nothing meanwhile.
// In the handover rounds b also charges some gadgets, resuming some of
// a's charges.
//
// In mode neither, no order is charged twice, or even asked twice: kfsm
// never runs the work again blindly. A gadget is Charged, its order
// charged once and the id in its note, or Stalled with reason
// ActionIndeterminate, a message that names the action and its key, the
// action's record kept without an outcome, and its order charged at most
// once. The gadget whose charge reached the crash point rests as follows:
// before-intent, Charged (no intent was written, so the charge ran
// afresh); after-intent and before-effect, Stalled and never charged;
// after-effect and before-outcome, Stalled and charged once. In modes
// keys and observe, it is Charged like the others.
//
// # Caveats
//
//   - Observe can tell only what has reached the service. The round
//     starts b once the service has been quiet for a moment, so that a
//     request that a dead process left on its way has arrived; a request
//     that arrives later than b's observation would be charged twice in
//     mode observe. The handover round starts b once every charge of a's
//     has arrived, for the same reason.
//   - Which slots b takes depends on the gadgets' UIDs: a handover round
//     runs twice the gadgets of the others, twenty, so that one in which
//     none falls in b's half, which fails as it tests no handover, comes
//     about once in a million rounds.
//   - The tests run on Linux.
package effects
