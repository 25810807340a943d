package fsm

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/fence"
)

// FenceLeaderElection makes a manager's leader election fence its
// writes: the process writes to the API server only while it knows that
// it holds the Lease, so that a leader frozen past its Lease (a paused
// VM, a long garbage collection, a partition) writes nothing once it
// wakes, while another process leads.
//
// controller-runtime's leader election (client-go's) does not fence: a
// leader learns that it lost the Lease only when a renewal fails, up to
// RenewDeadline after it tries, and meanwhile its controllers go on
// writing. The fence closes that gap with time alone. A standby takes the
// Lease only once LeaseDuration has passed since it saw the Lease change,
// and it cannot see a renewal before the leader sent it, so the leader
// holds the Lease for at least LeaseDuration after it sent its last
// successful renewal. The fence lets writes through for RenewDeadline
// after that moment, the time the elector itself allows, refuses them
// after, and then cuts off those it let through that are still waiting
// for their answer (on a partition, say), so that no handler waits on a
// write beside the next leader's; a write has the rest, LeaseDuration
// minus RenewDeadline, to reach the API server. It also refuses to
// release a Lease that may have moved, which client-go would otherwise
// empty under its new holder.
//
// Call it before manager.New with the configuration and the options that
// the manager gets: it changes both. identity names the process in the
// Lease; empty means the host name and a UUID, as controller-runtime
// names it. opts must ask for leader election with a LeaderElectionID and
// a LeaderElectionNamespace, and the Lease resource lock (the default).
// Reads are never refused, nor reviews (a SelfSubjectReview, an access
// review), which store nothing; a refused write fails with an error that
// says why, and the reconcile is retried once the process leads again.
// The fence assumes that the clocks of leader and standby advance at the
// same rate, and a write it lets through may still be delayed past
// LeaseDuration by a freeze between the check and the API server, or by
// a network that delivers it late: only a precondition checked by the
// API server could exclude that.
func FenceLeaderElection(cfg *rest.Config, opts *manager.Options, identity string) error {
	return fence.LeaderElection(cfg, opts, identity)
}
