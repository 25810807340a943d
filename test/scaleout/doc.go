// Package scaleout tests a kfsm operator scaled out to several replicas
// that share one machine's objects (sharding.New and Machine.Sharded),
// the way it runs in production: as separate processes, which the test
// starts, kills and stops with real signals. It holds tests only.
//
// # How it tests
//
// The tests start a real API server with the test API's CRDs and the
// alpha ShardedListAndWatch feature gate, and build the operator in
// internal/operator: one pipeline machine over Gadgets, without leader
// election, sharded in the group "scaleout" (LeaseDuration 4 s,
// RenewDeadline 3 s, RetryPeriod 1 s). Its handler works for 20 ms,
// applies a ConfigMap named like the gadget with the gadget's
// spec.target, and writes the target and the replica's name into the
// status.
//
// Around its work the handler reports to a recorder that the test runs
// on loopback: the replica, the gadget's UID and its generation, when it
// begins and when it ends. The recorder stamps each report as it
// arrives, and the handler waits for its answer, so the interval kept
// lies within the run: if two replicas never reconcile one gadget at
// once, their intervals for it cannot overlap. A run still open when its
// replica was SIGKILLed ends at the kill; a run still open when a replica
// stopped cleanly is a failure. The end says whether the handler ran to
// completion, so that the recorder counts work done twice: the gadgets
// whose handler ran to completion more than once on one generation since
// a hand-over began.
//
// Each replica's metrics endpoint is scraped for kfsm's shard metrics
// (kfsm_shard_members, kfsm_shard_slots, kfsm_shard_handovers_total,
// kfsm_shard_fallback) and for two counts of the operator's own, taken by
// a transform of its cache: every Gadget the cache decoded, and the
// distinct ones among them.
//
// # What the tests prove
//
// Three replicas, a, b and c, share 300 gadgets (1,000 in make
// fleet-test):
//
//   - Every gadget converges: its status counts to the target of its
//     generation, it is Ready, and its ConfigMap holds the target.
//   - No two replicas ever run the handler of one gadget at once, at any
//     step below.
//   - Each gadget is handled by one replica, and each replica handles
//     between 15 % and 55 % of them (64 hash slots over three: 21 or 22
//     each). Each sees the others as members and together they own the
//     64 slots.
//   - Each replica's cache decodes its slice, not the whole: fewer than
//     60 % of the gadgets, with the API server's shard selector, and of
//     their ConfigMaps, selected by their slot label.
//
// c is SIGKILLed and the targets of its gadgets raised at once. a and b
// take c's slots over once its Lease expires: they hold every slot
// within LeaseDuration, two RetryPeriods and 3 s of the kill (before
// LeaseDuration on a quiet machine), and a gadget from each of c's slots
// converges, handled by a or b. How soon they work through c's third of
// the gadgets is throughput, which a timed test on a loaded machine cannot
// bound fairly: the tests log it and the benchmarks measure it. Then d
// joins; once a, b and d share the slots, every target is raised again:
// some gadgets move to another replica, at most 60 % of them, and d
// handles at least 15 %.
// SIGTERM stops a, b and d with status 0, every run they began has ended,
// and their membership Leases are gone.
//
// Of two replicas, b is frozen (SIGSTOP) past its Lease: a takes its
// gadgets over, and when b wakes (SIGCONT) it runs no handler until it
// holds a new Lease, made after it woke, and slots in it.
//
// Of three replicas, c reaches the API server through a loopback proxy,
// which the test stops, twice, while c works, as a partition does: the
// bytes of c's open connections stop and its new connections hang. Each
// time a and b hold every slot of c's within LeaseDuration, two
// RetryPeriods and 3 s of the cut, and converge a gadget from each; c's
// runs in flight end before a and b begin theirs; and when the partition
// heals, c runs no handler until it holds a new Lease.
//
// At each hand-over (c's death, d's joining, b's freeze and waking, each
// partition and each healing) no gadget's handler runs to completion more
// than once on one generation.
//
// On an API server without the feature gate, two replicas fall back to
// caching every gadget (kfsm_shard_fallback is 1 and each decodes all
// 200), and still reconcile each gadget on one replica only, never two
// at once.
//
// The tests log the time the gadgets took to converge, the share of the
// gadgets each replica decoded, the time from the SIGKILL until the last
// of c's gadgets converged, and how many gadgets moved when d joined.
//
// # Caveats
//
//   - The recorder sees the handler, not the status write that kfsm makes
//     after it returns; the fence that sharding.New puts on the replica's
//     writes is what keeps that write within the replica's ownership.
//   - The test sees a gadget converge through a cache of its own, when the
//     watch event arrives, so measured times are a little long.
//   - The durations are short so that the tests are quick; the bounds
//     scale with them.
//   - The tests run on Linux.
package scaleout
