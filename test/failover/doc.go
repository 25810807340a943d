// Package failover tests a kfsm operator under leader election the way it
// fails over in production: two operator processes compete for one Lease,
// and the test kills, freezes and stops them with real signals. It holds
// tests only.
//
// # How it tests
//
// The tests start a real API server with the test API's CRDs and build the
// operator in internal/operator: one kfsm machine under controller-runtime's
// manager, with leader election on a Lease (LeaseDuration 4 s, RenewDeadline
// 3 s, RetryPeriod 1 s) and LeaderElectionReleaseOnCancel. Its leader
// writes the status of a gadget every 500 ms and keeps an asynchronous
// action running on another gadget; the action prints when it starts and
// when its context is cancelled.
//
// Each scenario starts two processes, a and b, in a namespace of its own.
// Each process reaches the API server only through a proxy of its own that
// the test runs: the proxy forwards every request with the test's
// credentials and records, as they arrive, every write (method, path, time,
// process, the API server's answer) and every change of the Lease. The
// record is the test's, outside both processes, so a process cannot leave
// a write out of it. The processes' User-Agents are checked against the
// proxies they came through.
//
// # What the tests prove
//
// Once a leads and b has seen it renew the Lease, at a random moment:
//
//   - SIGKILL. b takes the Lease only once it has expired, no sooner than
//     LeaseDuration after a's last renewal reached the API server. Its
//     first write follows within LeaseDuration of the kill, plus twice the
//     longest interval between a candidate's tries of the Lease
//     (RetryPeriod with client-go's jitter: 2.2 s), plus one reconcile
//     (500 ms), plus 1 s for scheduling. b resumes from the status that a
//     wrote.
//   - SIGSTOP, then SIGCONT once b has taken over. a is frozen past its
//     Lease and wakes up believing it still leads. b took the Lease only
//     once it had expired. a makes no write that reaches the API server
//     after b took the Lease, leaves the Lease with b, and exits with
//     status 1 when its elector gives up, RenewDeadline after it woke; b
//     goes on.
//   - SIGTERM. a cancels its action and says so, releases the Lease at once
//     (within a second; holderIdentity emptied, and b's takeover counts one
//     transition more), makes no write after that and exits with status 0.
//     b takes over well before LeaseDuration, within one try and one
//     reconcile, and starts the action again after a's was cancelled.
//
// The handover times, from the signal to b's first write, are logged with
// their median and range over three runs of the SIGKILL and SIGTERM
// scenarios.
//
// # Leader election does not fence
//
// client-go's leader election does not stop a leader that has lost its
// Lease from writing: the leader learns of the loss only when a renewal
// fails, up to RenewDeadline after it tries again, and meanwhile its
// controllers go on. The operator therefore runs behind kfsm's fence
// (fsm.FenceLeaderElection): it writes only within RenewDeadline of its
// last successful renewal, which a standby cannot overtake before
// LeaseDuration has passed, and it refuses to release a Lease it may no
// longer hold. The
// SIGSTOP scenario runs once more without the fence and asserts that the
// recorder does see the woken leader's writes: there the two leaders
// answer each other's writes until the old one's elector gives up.
//
// # Caveats
//
//   - The fence measures time on the monotonic clock of each process and
//     assumes that the clocks of leader and standby advance at the same
//     rate, as on one machine. A write that the fence lets through may
//     still be delayed, by a freeze between the check and the API server,
//     by more than LeaseDuration minus RenewDeadline; only a precondition
//     checked by the API server could exclude that.
//   - The durations are short so that the tests are quick; the bounds
//     scale with them.
//   - The tests run on Linux.
package failover
