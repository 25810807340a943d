// Package cesink sends the transitions of kfsm machines as CloudEvents, to
// tell systems outside the cluster where objects are. It lives apart from
// package fsm, so that operators that send no events do not link the
// CloudEvents SDK.
//
// # Use
//
// Make a CloudEvents client that sends where the events should go, and
// give New's observers to the machine's Observe:
//
//	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget("http://broker.example/"))
//	if err != nil {
//		return err
//	}
//	m := op.Machine()
//	m.Observe(cesink.New(m, events))
//	err = m.SetupWithManager(mgr)
//
// [Source], [TypePrefix] and [Timeout] change the defaults below.
//
// # The event
//
// Each transition is one event (CloudEvents 1.0) with these attributes:
//
//	specversion      1.0
//	id               ID(object's UID, transition): a digest of the UID, the
//	                 transition's time to the nanosecond, and its from and to
//	                 states
//	source           kfsm/<machine>, or what Source sets
//	type             dev.kfsm.transition (Type), or TypePrefix + ".transition"
//	subject          <namespace>/<name>, or <name> for a cluster-scoped object
//	time             when the object moved, to the nanosecond
//	datacontenttype  application/json
//	data             a Data, for example:
//
//	{
//	  "machine": "database",
//	  "object": {"group": "examples.kfsm.dev", "version": "v1alpha1", "kind": "Database",
//	             "namespace": "default", "name": "orders", "uid": "5f0c…"},
//	  "from": "Start",
//	  "to": "Running",
//	  "reason": "Next"
//	}
//
// The first transition of an object, into the initial state, has no
// "from". A transition carries no message: its reason says why the object
// moved, and the object's conditions say more.
//
// # Guarantees
//
//   - One event per transition whose status was written, and none for a
//     transition that a failed status write undid: kfsm calls the
//     observer only once the status that records the transition is
//     written (see fsm's Observers.Transition).
//   - The events of one object leave in the order of its transitions: the
//     observer sends in the reconcile and waits for the receiver's answer
//     before the next transition is told.
//   - The same transition gives the same id, so that a receiver can drop
//     a redelivery; two transitions of an object get different ids. Source
//     and id together are unique, as CloudEvents asks, since the id covers
//     the object's UID.
//   - Sending never fails the reconcile and holds it at most the timeout
//     per event (one second by default). An event that was not delivered
//     (no connection, a timeout, or a refusal such as an HTTP 4xx or 5xx)
//     is logged as an error through the reconcile's logger
//     (controller-runtime's log.FromContext), with the event's id, and
//     the walk goes on.
//
// # Assumptions
//
//   - The client is safe for concurrent use, as the SDK's clients are:
//     the machine's workers send at the same time.
//   - The object carries its apiVersion and kind, as kfsm's Transition
//     observers get it; the events name them. An object without them is not sent,
//     and the transition logs why.
//
// # Caveats
//
//   - Delivery is at most once. An event that is not delivered is not
//     sent again, and an operator that crashes between the status write
//     and the send loses the event. The object's status.history stays the
//     record; a consumer that must see every transition reads it.
//   - The events of different objects are not ordered with respect to
//     each other.
//   - A receiver that is slow, or down without refusing connections,
//     slows the machine: each of its events holds a reconcile worker up to
//     the timeout. Keep the receiver near the operator, such as a broker
//     in the cluster, or lower the timeout.
//   - The id needs the transition's time to the nanosecond, which the
//     event carries but status.history does not (it keeps seconds): the id
//     of a transition cannot be computed from the history alone. Under a
//     clock that stands still, such as a fake clock in tests, the same
//     from and to taken twice give the same id.
package cesink
