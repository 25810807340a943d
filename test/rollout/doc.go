// Package rollout tests a rolling update of a kfsm machine's graph: two
// operator processes, one of version 1 of the graph and one of version 2
// (Machine.Version), run at once over the same objects, and the test
// starts and stops them with real signals. It holds tests only.
//
// # How it tests
//
// The tests start a real API server with the test API's CRDs and the
// alpha ShardedListAndWatch feature gate, and build the operator in
// internal/operator: one Lifecycle machine, "rollout", over Gadgets.
// Version 1 moves a gadget from Start by its spec.target to Old, Both,
// Gone or Kept. Version 2 renames Old to New, splits Both into Left and
// Right by the parity of the name's last byte, removes Gone into Kept and
// adds Added. Every state but Start rests: its handler increments
// status.count, writes the process's name into status.note and waits
// 300 ms, so that the process that owns a gadget writes its status every
// 300 ms, a heartbeat that the API server sees. The operator runs either
// under leader election on a Lease, behind kfsm's fence, or as a sharded
// replica (sharding.New), with LeaseDuration 4 s, RenewDeadline 3 s and
// RetryPeriod 1 s.
//
// Each process reaches the API server only through a proxy of its own
// that the test runs: the proxy forwards every request with the test's
// credentials and records, as they arrive, every write with the process,
// the version of the graph that it runs, the time, the path and the API
// server's answer. Of a gadget's write the answer gives the status that
// the gadget has now, its graph version and the object's resourceVersion;
// of an event created, the request gives its reason and the gadget it
// regards. The record is the test's, outside the processes, so a process
// cannot leave a write out of it.
//
// # What the tests prove
//
// Sharded, 40 gadgets: replica a of version 1 moves them all alone. b of
// version 2 joins and takes every one of the 64 slots, as a replica of an
// older graph version stands aside while one of a newer version is live
// (both count a as standing aside), and b migrates every gadget. SIGTERM
// stops b, and a, which holds every slot again, as in a rollback, leaves
// every gadget alone: one Warning event NewerVersion each, one log line
// each, its counter kfsm_newer_objects_left_total at their number, and
// no write to any of them. b joins again and takes every slot, and
// SIGTERM stops a.
//
// Leader election, 16 gadgets: a of version 1 leads and moves them; b of
// version 2 stands by, takes the Lease when SIGTERM stops a, and migrates
// every gadget. a comes back, of version 1 as in a rollback, stands by,
// and leads again when SIGTERM stops b: it writes no gadget, tells of
// each once as above, and every gadget keeps its resourceVersion.
//
// In both, every gadget ends in version 2's state for its version 1
// state, at graph version 2, with a history that holds version 1's move
// from Start and, where the state changed, one move marked Migrated; and
// no process of version 1 writes a gadget after a process of version 2
// wrote graph version 2 into it: no write reaches the proxy after the API
// server answered that write, and the API server accepts none after it,
// by their resourceVersions.
//
// The negative control runs the leader election once more with an old
// version that cannot see the graph version (its cache forgets
// status.graphVersion) and asserts that the recorder does see it write
// the gadgets that version 2 wrote.
//
// # Caveats
//
//   - In the leader election, the returning process of version 1 starts
//     after the migration, and its cache holds it. A replica that takes a
//     slot reads the slot's objects from the API server first; a process
//     that becomes leader does not, so one whose watch lags behind the
//     newer version's writes is not covered here.
//   - The durations are short so that the tests are quick.
//   - The tests run on Linux, and skip under -short.
package rollout
