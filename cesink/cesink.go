package cesink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kfsm/kfsm/fsm"
)

// Type is the CloudEvents type of a transition, unless TypePrefix
// changes it.
const Type = defaultTypePrefix + typeSuffix

const (
	defaultTypePrefix = "dev.kfsm"
	typeSuffix        = ".transition"
	defaultTimeout    = time.Second
)

// Data is the data of a transition's event, in JSON.
type Data struct {
	// Machine is the name of the machine, as given to fsm.New.
	Machine string `json:"machine"`
	// Object is the object that moved.
	Object ObjectRef `json:"object"`
	// From is empty for the first transition into the initial state.
	From fsm.State `json:"from,omitempty"`
	To   fsm.State `json:"to"`
	// Reason is why the object moved, in CamelCase, as the status's
	// history records it.
	Reason string `json:"reason"`
}

// ObjectRef names the object of a transition.
type ObjectRef struct {
	// Group is empty for the core API group.
	Group   string `json:"group,omitempty"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
	// Namespace is empty for a cluster-scoped object.
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

// Option changes what New sends.
type Option func(*options)

type options struct {
	source     string
	typePrefix string
	timeout    time.Duration
}

// Source sets the source attribute, a URI-reference that names the
// operator, for example "https://orders.example.com/operators/database"
// or "//cluster-a/kfsm/database" when several clusters send to one
// receiver. The default is "kfsm/<machine>".
func Source(uri string) Option { return func(o *options) { o.source = uri } }

// TypePrefix puts the type in a reverse-DNS namespace of one's own: the
// type becomes prefix + ".transition". The default prefix is "dev.kfsm".
func TypePrefix(prefix string) Option { return func(o *options) { o.typePrefix = prefix } }

// Timeout bounds the delivery of one event; the default is one second. A
// d of zero or less keeps the default.
func Timeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// New returns the observers, for m's Observe, that send each transition
// of m's objects to c as a CloudEvent. c sends where it was made to send:
// for HTTP, give it the receiver's URL with cloudevents.WithTarget.
//
//	m.Observe(cesink.New(m, events))
//
// The events name the object's group, version and kind, which kfsm sets
// on the objects it gives its Transition observers. An object without a
// kind (given by another caller) is not sent: the observer logs why.
func New[T fsm.Object](m *fsm.Machine[T], c cloudevents.Client, opts ...Option) fsm.Observers[T] {
	o := options{source: "kfsm/" + m.Name(), typePrefix: defaultTypePrefix, timeout: defaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	s := &sink{machine: m.Name(), client: c, options: o}
	return fsm.Observers[T]{Transition: func(ctx context.Context, obj T, t fsm.Transition) {
		if obj.GetObjectKind().GroupVersionKind().Kind == "" {
			logf.FromContext(ctx).Error(errNoKind, "no CloudEvent sent for the transition", "from", t.From, "to", t.To)
			return
		}
		s.send(ctx, obj, t)
	}}
}

var errNoKind = errors.New("the object carries no apiVersion and kind to name it by")

// sink sends the events of one machine.
type sink struct {
	machine string
	client  cloudevents.Client
	options
}

// send delivers the event of transition t of obj, or logs why not; it
// returns within the timeout.
func (s *sink) send(ctx context.Context, obj fsm.Object, t fsm.Transition) {
	e := s.event(obj, t)
	log := logf.FromContext(ctx).WithValues("event", e.ID(), "type", e.Type(), "from", t.From, "to", t.To)
	if err := e.SetData(cloudevents.ApplicationJSON, s.data(obj, t)); err != nil {
		log.Error(err, "encoding the transition's CloudEvent")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if res := s.client.Send(ctx, e); !cloudevents.IsACK(res) {
		log.Error(res, "the transition's CloudEvent was not delivered")
	}
}

// event is the event of transition t of obj, without its data.
func (s *sink) event(obj fsm.Object, t fsm.Transition) cloudevents.Event {
	e := cloudevents.NewEvent(cloudevents.VersionV1)
	e.SetID(ID(obj.GetUID(), t))
	e.SetSource(s.source)
	e.SetType(s.typePrefix + typeSuffix)
	e.SetSubject(subject(obj.GetNamespace(), obj.GetName()))
	e.SetTime(t.Time.Time)
	return e
}

func (s *sink) data(obj fsm.Object, t fsm.Transition) Data {
	gvk := obj.GetObjectKind().GroupVersionKind()
	return Data{
		Machine: s.machine,
		Object: ObjectRef{
			Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind,
			Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(),
		},
		From: t.From, To: t.To, Reason: t.Reason,
	}
}

func subject(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// ID is the id of the event of transition t of the object with the given
// UID: the first 16 bytes, in lower-case hexadecimal, of the SHA-256
// digest of the UID, the transition's time in Unix nanoseconds in decimal,
// its from state and its to state, each followed by a zero byte. A
// receiver can compute it again from the event's time and data.
func ID(uid types.UID, t fsm.Transition) string {
	h := sha256.New()
	for _, part := range []string{string(uid), strconv.FormatInt(t.Time.UnixNano(), 10), string(t.From), string(t.To)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
