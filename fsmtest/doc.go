// Package fsmtest tests kfsm machines the way operators run them: against
// a real API server, under a real manager, with a fake clock, and with
// the faults that real clusters inflict. It is what kfsm's own tests and
// examples use.
//
// # The environment
//
// Main is the whole of a test package's TestMain. It starts etcd and
// kube-apiserver once for the package, when the first test calls New
// (optionally the workloads tier: garbage collection, Deployments, a
// scheduler and fake nodes), installs the CRDs, runs the tests, reports
// edge coverage and stops every process. Benchmarks and tests that need
// no API server run without one:
//
//	func TestMain(m *testing.M) {
//		fsmtest.Main(m, fsmtest.Options{
//			CRDs:        []fs.FS{v1.CRDs},
//			AddToScheme: []func(*runtime.Scheme) error{v1.AddToScheme},
//		})
//	}
//
// Each test calls New for an Env: a namespace of its own, a client for
// the test's own writes (Create, Update, Delete, Get) and a fake clock.
//
// # Two drivers, one set of assertions
//
// Run starts a machine under a controller-runtime manager whose cache and
// controllers see only the test's namespace, as it runs in production
// (its cache made by fsm.LeanCache, as kfsm init makes it, unless
// WithManagerOptions sets a NewCache of its own): the test changes
// objects and awaits outcomes. RunFunc makes the machine anew for each
// operator process, so that Operator.Restart also loses
// what the handlers keep in memory; WithMachine runs a second machine in
// the same manager. Steps runs it one
// reconcile at a time instead, and Step returns what happened: the
// handlers that ran, the result kind (Next, Wait, Done, Fail, Stop), the
// edges taken and the requeue, so that a test can tell "continue at once"
// from Wait, Done and Fail. Settle steps until nothing is due.
//
// The assertions are the same under both: AwaitState, AwaitCondition,
// AwaitReady, AwaitGone and Await make the operator work until they hold
// (the manager by waiting, the step driver by running the reconciles that
// are due, and when none is while an action runs, by waiting for the
// machine to ask for one: an action asks both drivers alike, through a
// queue, when it ends or saves a checkpoint);
// Transitions ("A→B", and "A→B (migrated)" where a new graph version
// migrated the object), Runs (handler runs per state), Writes
// (the operator's API writes to objects by verb, counted in its HTTP
// transport, not the cache; events, the graph a machine publishes on its
// CRD and a webhook's question of who the operator is are neither
// counted nor faulted), Events, Children and KStatus read what happened, and
// Kubectl shows what a user sees. They
// return plain values, for cmp.Diff. At its end, every test also fails
// if a handler ran on a copy of an object older than one the operator had
// itself written: a stale cache that kfsm's guard did not catch, or a
// handler that wrote its own object behind kfsm's back. A write that took
// the last finalizer off, and so deleted the object, counts as newer than
// the version the API server answered it with, the one before.
//
// # Permissions and webhooks
//
// With Options.Roles, every operator runs as the ServiceAccount
// OperatorUser, bound to the given ClusterRoles (as controller-gen
// generates them from +kubebuilder:rbac markers) and nothing more: a
// permission the role lacks fails the test, and the failure lists the
// requests the API server refused. Without it the operator is a member of
// system:masters, where no missing permission shows.
//
// WithWebhooks serves the machine's admission webhooks from the
// operator's manager and has the API server call them over TLS for the
// test's namespace, with a certificate made for the test; a refused
// write fails in the test's client or in Kubectl as it fails for a user.
// While the operator is stopped, its webhooks are down and the failure
// policy decides.
//
// # The fake clock
//
// Env.Clock starts at Epoch. Give it to the machine with WithClock; then
// a Timeout, a Wait and a failure's backoff wait on it, under either
// driver. Under the manager, kfsm times those requeues on the clock
// itself, so that a 30-minute timeout fires as soon as the test calls
// Clock.Step(30*time.Minute), and not before. Requeues that only continue
// work (a state entered twice, a write that raced) stay on real time.
//
// # Edge coverage
//
// Every reconcile that Run or Steps drives reports the declared edges it
// took: exits, timeout and retries edges, and the entry into the deletion
// path. At the end of the package, Main prints one line per machine,
//
//	machine rollout: 14/17 edges covered; never taken: Analyzing→RollingBack (timeout), …
//
// A test that keeps an earlier version of a machine's graph to migrate
// from (fsm.Machine.Version) covers each version apart, one line each,
// labelled with its version and whether it is the current one:
//
//	machine rollout, graph version 2 (current): 14/17 edges covered; …
//	machine rollout, graph version 1 (superseded by version 2): 3/15 edges covered; …
//
// A superseded version counts toward no threshold.
// writes a profile with -kfsm.coverprofile=FILE (or one file per package
// into the directory named by $KFSM_COVERDIR), and fails the package
// under -kfsm.covermin=PERCENT or Options.MinCoverage. Profiles of several
// packages merge by concatenation; `kfsm cover` prints them, or draws each
// machine as Mermaid or DOT with the edges never taken marked.
//
// # Spec changes from the schema
//
// Mutations reads a CRD's schema and suggests changes of an object's
// spec, as Acto (SOSP '23) drives an operator: integers at their bounds,
// zero and the middle, each enum value, strings at their shortest and
// longest, booleans flipped, optional fields removed, arrays emptied, at
// their bounds and with an element appended, map keys added and removed,
// null. Apply makes some of them between the scenario's Awaits, in an
// order drawn from a seed:
//
//	changes, err := fsmtest.Mutations(e.CRD(door), 1)
//	...
//	for range 6 {
//		changes.Apply(e, door, 1)
//		e.AwaitState(door, want(door.Spec))
//	}
//
// The real API server judges each change before it is made, by a
// server-side dry run against the object as it is: the OpenAPI schema,
// the CEL rules with their transition rules, and admission. A refused
// change is never made. Every change is logged with the seed, and the
// same seed, with the same answers from the API server, makes the same
// changes, in each Env of its own: in every run of Faults too.
//
// # Fault injection
//
// Faults runs a scenario (a function that drives objects through
// create, changes and delete with the Env's methods) once cleanly, then
// once per fault point of each class, after the bug classes of Sieve
// (OSDI '22) and Acto (SOSP '23). It is Explore (below) at depth 1,
// with these classes:
//
//   - Crash: the operator process dies right after its k-th write, for
//     every k; a new process, with nothing in memory, takes over. It
//     finds work that is not idempotent, children made with
//     generateName, and state kept only in memory.
//   - FailWrite: the k-th write fails before it reaches the server. It
//     finds errors that are dropped.
//   - StaleReads: watch events reach the operator late, so its cache lags
//     behind its own writes. It finds handlers that count or look up
//     objects in the cache and act as if the cache were current.
//   - Conflicts: the k-th write, for every k that changes an object (an
//     update or a patch), is answered 409 Conflict. It finds conflicts
//     treated as final.
//   - Bursts: the changes are made while the operator is stopped, so it
//     never observes the states in between. It finds handlers that count
//     on seeing every change.
//   - CrashInAction: the process dies inside each action, as its work
//     starts and as it returns, before its outcome is written; with
//     Crash's points before and after the intent's write, that is every
//     point of an action's life. It finds an action declared Idempotent
//     that is not, or an Observe that misses an effect: count the
//     effects where the action makes them and show the count in the
//     status, and a second effect is a divergence.
//   - OutsideFailures: each call that the clean run made to an outside
//     system, as its fake declares it with Env.Outside and makes its
//     effects through Outside.Call (or its client's requests through
//     Outside.Transport), fails before its effect, makes its effect and
//     loses its answer, and makes its effect and times out; a Read, which
//     has no effect, only fails.
//     It finds a retry that repeats an effect after an ambiguous
//     failure: an action's key not sent to the system, or an Observe
//     that misses the effect.
//   - Drift: each change that an outside system makes behind the
//     operator's back, as its fake declares it with Outside.Drift (a
//     database stopped by hand, a DNS record removed), made once before
//     each of the scenario's changes. It finds handlers that trust what
//     the status says they did over what the system says now.
//
// Each faulty run is compared with the clean run at every Await: the
// objects' status (without times, UIDs and versions, nor the key and
// times of each action's record, which name a run and differ in every
// one), finalizers and children (kind, name, labels, annotations,
// content). It must converge in bounded time, come to rest, and no
// handler may run on a copy older than one the operator wrote itself:
// Explore's oracles. A divergence fails the test with the fault point,
// the diff, and a command that replays that run.
//
// What it proves: that the machine reaches the same objects despite each
// fault at each point of this scenario. What it does not: faults at
// points the scenario never reaches, two faults in one run (Explore's
// work), a crash in the middle of a write (the API server applies a write
// whole or not at all), or races that the timing of this machine never
// produces.
//
// # Fault exploration
//
// Explore takes the same machine and scenario and runs them under every
// combination of up to Depth faults (-kfsm.depth overrides it): a crash
// after the operator's write N to an object, that write failed or
// answered 409 Conflict (each object's writes counted on their own, for
// the writes to several interleave otherwise from run to run), watch
// event N of a resource late (the other watches going on, so that parent
// and children arrive out of order) or lost with the cache listing anew, a
// crash at the start or end of action N, call N to an outside system
// failed, its answer lost or timed out, a drift of an outside system
// before the scenario's change N, every event late, a burst of changes
// seen as one. Faults and Explore share one vocabulary: each kind of
// fault is of a class of Faults, or Explore's alone (the delayed and
// lost watch events, the jumps of the fake clock), and Only narrows
// either to some classes. Most bugs that one fault misses need two: a
// crash during the recovery from a conflict, a lost status write after a
// burst.
//
// A run with k faults grows from one with k-1 that passed. Each point
// where a fault may strike has a key: what the scenario changed so far,
// each object as the operator's last write to it left it (times, UIDs and
// versions left out, and the status of children, which other controllers
// write) and what happens there. A fault at a point whose key was
// explored before is not run again; the recovery after a fault mostly
// repeats the clean run, so that depth 2 costs a few times depth 1, not
// its square: for the moose and database examples, depth 2 runs one in
// ten or twenty of the schedules it generates, 91 to 159 runs beside the
// 61 to 67 of depth 1.
//
// Every run is checked by the snapshots above, and by eventual stable
// reconciliation: once the scenario ends and the operator is quiet, a new
// operator process, which reads every object anew, must make no write and
// take no transition. A machine that writes a counter or a time into its
// status on every run fails here, in its clean run already. Then nothing
// may be left being deleted, no child of kfsm's may be left without its
// parent and an owner reference, and no object that the scenario created
// (other than the machine's) may be written. With Replicas, the operator
// runs as replicas that share the machine with sharding.New, a crash
// kills one of them, and no object may be reconciled by two at once. A
// failure is shrunk to the
// fewest faults that still fail, printed with the transitions of the run
// beside the clean run's, and ends with a command that runs it again:
//
//	replay: go test -run '^TestDatabaseSurvivesFaults$' . -kfsm.explore='burst,fail:databases/orders:4'
//
// A run that failed only beside the others, and passed when run again
// alone, is reported with one more command, which runs the whole search
// again under the same load (-kfsm.depth and -kfsm.parallel as it ran).
package fsmtest
