package fsm

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Request is what a handler gets: the object and what it needs to act. It
// is valid until the handler returns; kfsm reuses it for the next handler.
type Request[T Object] struct {
	// Object is the latest copy of the object. Change its status freely:
	// kfsm writes the status once, after the walk, if anything changed.
	// Changes to anything but the status are not written.
	Object T
	// Client reads and writes other objects.
	Client client.Client
	// Log has the machine, the object and the state attached.
	Log logr.Logger
	// Clock is the machine's clock; use it instead of time.Now so that
	// tests can move time.
	Clock clock.PassiveClock
	// State is the state whose handler runs; From is the state the object
	// came from, empty for the initial state's first run.
	State, From State
	// Since is when the object entered State.
	Since time.Time
	// Attempt counts the runs of this handler since the last success: 1,
	// then 2 after a failure, and so on.
	Attempt int

	recorder events.EventRecorder
}

// Event records a Kubernetes event about the object: eventtype is
// "Normal" or "Warning", reason a CamelCase word, note a sentence.
func (r *Request[T]) Event(eventtype, reason, note string) {
	r.recorder.Eventf(r.Object, nil, eventtype, reason, string(r.State), note)
}
