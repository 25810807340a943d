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
//   - [Fail] retries after a backoff (1 s, then 2 s, 4 s... up to 5
//     minutes) and counts the failure;
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
// # Children
//
// A handler creates and changes child objects with [Request.Apply] and
// removes them with [Request.Delete]; their types must be declared with
// [Machine.Owns], and a change to a child reconciles its parent. Apply is
// server-side apply under the machine's field owner ("kfsm-<name>"), with
// a controller owner reference to the parent where one can exist, the
// label app.kubernetes.io/managed-by=kfsm and a label with the parent's
// UID. Status.Outputs lists the children (group, kind, namespace, name).
//
// Children that are no longer desired are pruned, by this rule:
//
//   - Pipeline: a pass that ends Done in a final state desires exactly
//     the children it applied; kfsm deletes the parent's other children.
//     A pass that waits, fails or stops prunes nothing.
//   - Lifecycle: each child belongs to the state whose handler applied it
//     last. When a state's handler returns Done, that run desires exactly
//     the children it applied among the state's own; kfsm deletes the
//     state's other children. Next, Wait, Fail and Stop prune nothing, and
//     the children of other states are left alone.
//   - Deletion path: when its final state is done, every child goes,
//     before the finalizer is removed.
//
// A child is found by the parent's UID label as well as in the status, so
// a child applied just before a crash, and never recorded, is pruned all
// the same. Only objects that carry the label are deleted, and only if
// their UID is still the one kfsm applied. Garbage collection deletes the
// children of a deleted parent through the owner references; children
// that cannot have one (cluster-scoped under a namespaced parent, or in
// another namespace) need an OnDelete state, whose path deletes them.
//
// An apply that would change nothing is not sent, by this rule: for
// each child, kfsm remembers a digest of the content it last applied and
// the resourceVersion of the child that the API server answered with
// (in Status.Outputs, and in memory until the status records it). When a
// handler applies the same content again and the cache still holds the
// child at that version, Apply returns the cached child without a
// request. Any change by anyone else, or a new object of the name, has
// another version, so drift is still taken back and a conflict still
// reported on the next apply. An apply that changed nothing on the
// server (the child's version moved because someone else changed other
// fields, such as a Deployment's status) is remembered in memory only,
// so that it costs no status write; after a restart such a child is
// applied once more. A converged object therefore costs no API request
// on a resync or a restart, however many children it has.
//
// Under a manager, children are found through kfsm's index of the
// parent's UID label, which files a child before any filter or handler of
// the machine sees the child's event: a reconcile costs the same however
// many objects the cache holds, and the reconcile that a child's event
// starts finds that child. Children of an unstructured type are listed
// by the label.
//
// Apply never takes over an object that kfsm did not create for the
// parent: if one of the child's name exists, Apply fails with an
// [AlreadyExistsError] and the state with reason AlreadyExists, and
// nothing is written. A handler that means to take such an object over
// says so: with [Adopt], kfsm applies its fields and labels but gives it
// no owner reference and never deletes it (when it is no longer desired,
// or its parent goes, kfsm removes its own labels and annotations and
// leaves the object); with [AdoptAndDelete], it becomes a child like the
// others. An object that another parent has is never adopted.
//
// On the children it applies, kfsm sets the labels [LabelManagedBy]
// (kfsm), [LabelMachine] and [LabelOwnerUID], and the annotations
// [AnnotationOwner] (children without an owner reference: adopted ones,
// and those in another namespace than the parent's), [AnnotationState]
// (lifecycle machines) and [AnnotationAdopted] (adopted objects). A
// pipeline's child that its owner reference leads back from carries no
// annotation of kfsm's, which spares each one a map in every cache.
//
// Fields that someone changed with an update (kubectl edit, a controller
// that updates) are drift and are taken back on the next Apply. Fields
// that another server-side applier owns are a conflict: Apply returns a
// [ConflictError] naming the manager, and the state fails with reason
// ApplyConflict, unless the apply passes [ForceOwnership]. An Apply or
// Delete that fails makes the handler's run fail, whatever it returns.
//
// # Goals
//
// A lifecycle machine may declare a goal with [Machine.Goal], typically
// read from the spec (spec.desiredState). kfsm finds the shortest path of
// declared exits from the current state (ties go to the exit declared
// first) and gives handlers the goal and the next hop in
// [Request.NextHop]; a handler that returns Next(r.NextHop) walks the
// object there one state at a time, and at the goal NextHop is empty. A
// new goal re-plans from where the object is. An unknown or unreachable
// goal runs no handler and makes the object Stalled with reason
// GoalUnreachable and a message that names the state, the goal and what
// can be reached instead; [Machine.CheckGoal] gives the same answer to an
// admission webhook.
//
// # Events with priority
//
// A handler that sees several things at once raises them all:
// Next(Stopping, Servicing) takes whichever of the two exits was declared
// first, and the event [Default] takes the last exit, the default child in
// OKT's words. An event that names no exit makes the transition illegal.
//
// # Asynchronous actions
//
// Work that takes longer than a reconcile should, such as a backup, runs
// as an action: [Request.Action] starts it in the machine's bounded pool
// ([Tuning.ActionLimit]) outside the reconcile worker and reports it
// pending, succeeded or failed on later calls; its completion reconciles
// the object at once. Actions are durable: the status records each one's
// intent (Status.Actions: its name, a key, the state and the attempt)
// before its work starts, and its outcome and result once it ends, so
// that what an action did outlives the process that ran it. A long action
// saves progress with [ActionRun.Checkpoint] and resumes from it;
// [Heartbeat] tells a slow action from a lost one; [Deadline] bounds it.
//
// An action whose run is lost before its outcome is recorded (a restart,
// a failover, a shard slot handed over) is indeterminate. kfsm does not
// run it again blindly: with [Observe] it asks the outside system, by the
// action's key, whether the effect happened; with [Idempotent] it runs
// the work again under the same key, which the work sends as an
// idempotency key; with neither it stalls the object with reason
// ActionIndeterminate, for a person to check and annotate kfsm.dev/retry.
// A run whose work returned an error is retried, when the handler asks
// again, under the same key, and with [Observe] only once it reported the
// effect not done: an error may come after the effect, as when its
// answer is lost or times out. Each external effect thus happens once
// when the action has a key the outside system honours or an Observe;
// with neither, a run lost to a crash happens at most once, the object
// stopped rather than the effect repeated, and a run whose work failed
// is run again, so its work must return an error only when it knows the
// effect did not happen.
//
// Deleting the object cancels the actions started before the deletion,
// whose records stay for the deletion path to clean up after, and leaving
// a state cancels its actions. The metrics
// kfsm_actions_running, kfsm_actions_completed_total and
// kfsm_actions_failed_total count them by kind ([ActionKind], by default
// the state that started them), never by a name made at run time. A handler that itself runs longer
// than [Tuning.SlowHandlerAfter] (5 s by default) holds a reconcile
// worker, and with one worker every other object: kfsm logs it once per
// state, pointing to Request.Action.
//
// # Objects a machine reads
//
// [Machine.Watches] reconciles objects when something they refer to but
// do not own changes, such as a Secret named in the spec, through a
// mapping function. A watch may be of the machine's own kind, to wake
// other objects when one changes; kfsm's own writes of an object, which
// never wake that object itself, still reach such a mapping, once the
// cache has them.
//
// # Conditions
//
// Every machine sets Ready, Reconciling and Stalled as kstatus reads them,
// each stamped with the generation, and status.observedGeneration: kubectl
// wait --for=condition=Ready, Flux and Argo CD understand kfsm objects. The
// state itself is informational; conditions are the contract.
//
// # Running under a manager
//
// Under controller-runtime's manager, every write comes back as a watch
// event. kfsm's own writes (the finalizer, the status, children it applies
// or deletes) never drive its loop: their events are dropped, and the next
// reconcile after a write is the one kfsm scheduled, after a Wait, a
// backoff, a timeout or a resync. Changes made by anyone else (the spec,
// a label, a child edited by hand, a watched object) reconcile the object
// at once. An apply that changes nothing is not one of kfsm's writes: a
// change of the child by someone else that the cache has yet to see is
// still news when its event comes.
//
// A failed handler's backoff is kept in status.retryAt, so it holds
// whatever happens to the object meanwhile, and across a restart of the
// operator: no handler runs before, unless the spec changes (a new
// generation starts afresh), a retry is asked for, the deletion path
// starts, or the state's timeout comes first.
//
// The status is written as a merge patch of what the walk changed, so a
// change that someone else makes to the object during a walk does not
// throw the walk away.
//
// A handler's failure is returned to controller-runtime as a
// *[HandlerError]: it counts in controller_runtime_reconcile_errors_total
// and is logged once, as a "Reconciler error" with the state, the attempt
// and the error. The machine's rate limiter requeues the object when the
// backoff ends. The failure that exhausts a state's retries is returned as
// a reconcile.TerminalError, which controller-runtime counts in
// controller_runtime_terminal_reconcile_errors_total and does not requeue.
// kfsm recovers a handler's panic itself, so that the status records it:
// it counts as a failure there, not in
// controller_runtime_reconcile_panics_total.
//
// An operator with many objects can give its manager the cache of
// [LeanCache], as the operators that kfsm init writes do: it keeps no
// managed fields, which kfsm never reads, and one copy of each string
// that repeats from object to object.
//
// If the CustomResourceDefinition of the machine's kind, or of a typed
// kind it owns, is deleted while the operator runs (the API server
// deletes its objects first, and their deletion paths run as for any
// deletion), kfsm logs it once, with the resource, and the kind's
// informer stops listing and watching it, where client-go would retry for
// ever with an error each time; the manager's other kinds go on, and a
// handler that applies a child of the deleted kind fails, on its object's
// backoff. kfsm asks discovery every ten seconds whether the resource is
// back; once it is, the informer lists it again and the machine
// reconciles its new objects, in the same process: exiting instead would
// stop the other controllers too, and fail at every start until the CRD
// is back. For this, the informers of these kinds start with the
// manager's cache, before its controllers, and take kfsm's watch error
// handler (in place of cache.Options.DefaultWatchErrorHandler). A cache
// of the whole cluster, the default, lets them; the informers of a cache
// of some namespaces take none, and keep client-go's retries.
//
// # Retrying and pausing an object
//
// Two annotations let a person act on one object without a spec change:
//
//   - [AnnotationRetry] (kfsm.dev/retry), set to a new value such as the
//     time, runs the current state's handler now: a Stalled object
//     resumes, with fresh retries, and a backoff ends. The value acted on
//     is kept in status.lastHandledRetry, and the handlers of the
//     reconcile that acts on it see Request.RetryAsked.
//   - [AnnotationPaused] (kfsm.dev/paused) set to "true" stops every
//     handler of the object, the deletion path included, until it is
//     removed; the Paused condition says so meanwhile.
//
// # Seeing what happens
//
// Every transition adds an entry to Status.History (bounded; see
// [Tuning.HistoryLimit]), records a Kubernetes event (events.k8s.io),
// writes a log line with the machine, object, states and reason, counts in
// kfsm_transitions_total, and tells the [Observers.Transition] observers,
// each once, and only once the status that records it is written. A
// transition event's reason is why the object moved (Created, Next,
// Timeout, RetriesExhausted, Deleted, or where a pipeline's pass rests),
// its action the state it entered; moves that kfsm forced (Timeout,
// RetriesExhausted) are warnings. Events about a child name it as the
// related object. Notes are cut to the events API's 1,024 bytes. Under a
// manager, kfsm writes its events in the background: repeats of an event
// (the same type, reason, action, and object and related object at the
// same resourceVersion) within six minutes of the last are one Event with
// a series, whose count is written at the second and then at most every
// ten seconds; when 1,024 writes wait, as when the API server refuses
// events for long, new events are dropped and the drops logged.
//
// The Prometheus metrics, registered with controller-runtime's registry:
// kfsm_transitions_total (machine, from, to, reason),
// kfsm_state_duration_seconds, kfsm_objects, kfsm_stalled_objects,
// kfsm_reconciling_objects, kfsm_handler_errors_total,
// kfsm_status_write_errors_total and the action metrics. Package alerts
// holds alert rules for them, and a Grafana dashboard. Each reconcile is
// an OpenTelemetry span with a child span per handler, their attributes by
// the semantic conventions (k8s.namespace.name) or under kfsm.*; each
// committed transition is a kfsm.transition event, and a reconcile links
// to the span that made the object's last transition
// (Transition.TraceParent). The graph can be drawn: see [Machine.Graph]
// and package graph.
//
// # Changing the graph
//
// [Machine.Version] numbers the graph and declares what each version
// changed: [Rename], [Split], [Merge] or [Remove] a state. kfsm migrates
// an object of an older version when it next reads it, in one status
// write, children and history kept; an operator of an older version, as
// in a rolling update, leaves an object of a newer one alone and says so
// (reason NewerVersion). [graph.Lock] refuses a change that would strand
// objects.
//
// # The graph in the cluster
//
// A machine's graph is published where tools find it without the
// operator's code: in the annotation graph.kfsm.dev/<machine>
// ([AnnotationGraphPrefix]) of the CustomResourceDefinition of the
// resource it drives, as a [PublishedGraph] in JSON (the machine's name,
// the resource, the version of kfsm and the graph as package graph's
// JSON). kubectl fsm and the dashboard read it with get on
// customresourcedefinitions.
//
// The graph is known when the operator is built, so the CRD's manifest
// carries it: [Machine.GraphAnnotation] makes the annotation, and a
// project's code generation writes it into the CRD (kfsm init's projects
// do so in make generate, and fail make verify when it is stale). The CRD
// then carries the graph from the moment it is installed, and the
// operator needs no right to write CRDs, a right that would let it
// rewrite the schema of the resources it serves.
//
// When its manager starts (and, with leader election, once it leads), a
// machine reads its CRD and compares the annotation with its own graph:
// the same (whichever kfsm version the annotation names) costs that one
// read. When they differ (a CRD installed from
// older manifests, or without the annotation), it patches the annotation
// if its role lets it, and otherwise says so in one log line and works on;
// tools then show the CRD's graph, or none. A machine that drives a
// built-in resource, or that may not read its CRD, publishes nothing and
// says why in one log line. [Machine.PublishGraph] turns the check and
// the publishing off.
//
// # Testing
//
// Package fsmtest tests machines the way they run: a real API server per
// test package, the machine under a manager or one reconcile at a time,
// a fake clock, edge coverage and fault injection. It builds on two hooks
// that other tools may use too: an [Observers.Walk] reports every reconcile's
// handler runs, results and edges taken, and a clock given with
// [Machine.WithClock] that is not the real one (k8s.io/utils/clock/testing's
// FakeClock) also times the requeues of a machine under a manager (Wait,
// timeouts, backoff), so that moving the clock fires them.
//
// # Admission webhooks
//
// [Machine.SetupWebhookWithManager] serves a machine's admission webhooks
// on the manager's webhook server (every replica serves them; they need
// no leadership). The validating webhook, at [Machine.ValidatePath],
// checks what kfsm knows:
//
//   - a goal ([Machine.Goal]) that no path reaches from where the object
//     is refuses the create or the update that asks for it, with the
//     message of the GoalUnreachable condition; only a change of goal is
//     checked, so that the operator's own writes pass while an object is
//     stalled;
//   - a write of the status that changes a field of [Status] is refused
//     unless it comes from the operator: the users of
//     Admission.Operators, or else the identity that the manager's client
//     authenticates as (asked of the API server when the manager starts,
//     with a SelfSubjectReview, which every authenticated user may make,
//     and which a fenced replica makes whether it leads or not). The
//     type's own status fields stay open to whoever may write the status.
//     While the identity cannot be learnt, the webhook lets status writes
//     through with a warning to the writer and logs an error, tries again
//     every five seconds, and refuses nothing: refusing would stop the
//     operator's own writes.
//
// [Machine.Admission] adds the author's checks (ValidateCreate,
// ValidateUpdate and ValidateDelete, for writes of the spec and metadata)
// and defaults (Default, served at [Machine.DefaultPath]).
//
// The API server calls the webhooks once configurations name them;
// [Machine.WebhookConfigurations] makes them for a resource and a way to
// reach the webhook server (a Service in a cluster). Both fail closed
// (failurePolicy Fail): while no replica of the operator serves, the API
// server refuses creates and updates of the kind and of its status with
// "failed calling webhook", rather than let them through unchecked.
// Deletes go through the webhook only when ValidateDelete is given, so
// that a namespace can always be deleted.
//
// In a cluster, the webhook server needs a serving certificate whose CA
// the configurations carry in caBundle. With cert-manager: a Certificate
// for the Service's DNS name (NAME.NAMESPACE.svc) whose Secret is mounted
// at the webhook server's CertDir (by default
// /tmp/k8s-webhook-server/serving-certs, files tls.crt and tls.key), and
// the annotation cert-manager.io/inject-ca-from: NAMESPACE/CERTIFICATE on
// both configurations, which fills caBundle. Without cert-manager, mount
// a certificate from any source at CertDir and set caBundle to its CA.
// In tests, fsmtest's WithWebhooks makes a certificate and the
// configurations for the test's namespace, and the API server calls the
// webhooks over TLS.
//
// # One machine on several replicas
//
// A machine runs on one active replica unless it is sharded: with
// package [sharding] and [Machine.Sharded], every replica of the operator
// runs the machine, each on the objects of its own slice, so that a fleet
// too large for one process is shared by several:
//
//	opts := manager.Options{...} // no leader election for the machine
//	shards, err := sharding.New(cfg, &opts, sharding.Options{Name: "moose", Namespace: podNamespace})
//	mgr, err := manager.New(cfg, opts)
//	m.Sharded(shards)
//	err = m.SetupWithManager(mgr)
//
// The number of replicas is not configured: each replica keeps a Lease
// in Namespace, labelled with [sharding.LabelShards], and the replicas derive
// their slices from the live Leases. The objects are divided by the
// FNV-1a hash of their UID into 64 slots; a Lease's [sharding.AnnotationSlots]
// lists the slots its replica holds. A replica joining or leaving moves
// about one replica's share of the slots.
//
// What it guarantees:
//
//   - No object is reconciled by two replicas at once. A replica gives a
//     slot up only once the reconciles and actions of its objects have
//     ended; another takes it only once no Lease lists it.
//   - A replica that dies without a word (SIGKILL, a lost node) or is
//     cut off from the API server (a partition) has its slots taken once
//     the others have seen its Lease unrenewed for LeaseDuration: within
//     LeaseDuration and a RetryPeriod of its last renewal, as the others
//     look at the Leases when one expires and claim its slots as soon as
//     their caches hold them; its objects are reconciled a reconcile
//     later. A replica that stops cleanly hands its slots over at once.
//   - A replica frozen past its Lease (a paused VM, a partition) writes
//     nothing once it wakes: its writes are fenced by its own renewals,
//     as [FenceLeaderElection] fences a leader's, and the others delete
//     its Lease before they take its slots, so that its next renewal
//     fails. A write still waiting for its answer when the fence closes
//     is cut off, so that a partitioned replica's handlers, which would
//     hang on their writes, end before the others take its slots.
//   - A hand-over reconciles each object that moved once, on its new
//     owner, and none of the objects that stayed where they were.
//   - The first reconcile of an object after a handover waits until the
//     replica's cache has the version the API server has (the stale-cache
//     guard, guarantee 5 below), so the new owner does not act on what
//     the old one had already changed.
//
// What it does not: objects are reconciled in no particular order across
// replicas, as across workers; a handover costs a list of the slots of
// each replica whose slots change, and a reconcile of each object that
// moved, also one that its old owner had finished; a handler that a
// frozen replica was running when it froze runs on when it wakes, beside
// the new owner's, with its writes refused; a write that the network
// delivers late, after a partition heals, lands whoever holds the object
// then; and what a handler does outside the API server is not fenced.
//
// Each replica's cache lists and watches only its slice of the machine's
// objects, with the API server's shard selector (Kubernetes 1.36, alpha,
// feature gate ShardedListAndWatch on kube-apiserver), so that a replica
// receives and decodes about 1/N of them; when its slots change, its
// cache's watches list its slots and take in what differs, without the
// informers listing again (client-go waits longer before each list an
// informer makes, up to 30 s). A replica that takes a slot queues each
// of its objects once its cache holds them, and the watch events of that
// catching up start no reconcile of their own; the machine's Watches of
// its own kind still map them to the other objects they concern. On
// a server without the gate, every replica caches every object and
// reconciles only its own: the work is still disjoint, and kfsm logs it
// once and sets kfsm_shard_fallback to 1.
// Children are selected too, on any API server: a sharded machine's
// children carry their parent's slot in the label [sharding.LabelSlot],
// and each replica's cache lists and watches them with a label selector
// that leaves out the other slots' (objects without the label stay in).
// So a replica's memory for the machine falls with the number of
// replicas.
// Other kinds, and children applied before the machine was sharded (until
// it applies them again), are cached in full; kinds from Watches are not
// sharded.
//
// Metrics of each replica: kfsm_shard_members (live replicas it sees),
// kfsm_shard_slots and kfsm_shard_range (how many slots it holds, and
// which), kfsm_shard_handovers_total (slots gained and released) and
// kfsm_shard_fallback; kfsm_objects counts the objects it holds, by
// state. A sharded replica also needs get, list, create, update and
// delete on coordination.k8s.io leases in Namespace. The capacity model
// is in docs/scale-out.md.
//
// # Controller options
//
// The machine's controller takes controller-runtime's options as they
// are: [Machine.WithOptions] (a controller.Options: rate limiter,
// reconciliation timeout and the rest), [Machine.ForOptions] (the For
// watch's options, such as builder.WithPredicates),
// [Machine.WithEventFilter], and the builder's options on [Machine.Owns]
// and [Machine.Watches].
//
// # Permissions
//
// A machine's service account needs, in the namespaces it serves (or
// cluster-wide):
//
//   - on its own kind: get, list, watch, and patch (the finalizer, for a
//     machine with OnDelete); on its status subresource: patch; on its
//     finalizers subresource: update, where the OwnerReferencesPermission
//     admission plugin is on (children's owner references block deletion);
//   - on each kind it Owns: get, list, watch, patch (server-side apply),
//     delete; and create where children are new;
//   - on each kind it Watches: get, list, watch;
//   - on events.k8s.io events: create and patch;
//   - to check the graph that its CRD carries (see "The graph in the
//     cluster"): get on its own kind's CustomResourceDefinition only
//     (resourceNames), cluster-wide. It needs no write on CRDs; patch
//     there, which lets a machine publish its graph at run time on a CRD
//     installed without it, also lets the operator change the CRD's
//     schema, and is best left out;
//   - with leader election or sharded replicas ([sharding.New]), on
//     coordination.k8s.io leases in the namespace of the Leases only (a
//     Role, not a ClusterRole): get, list, create, update and delete;
//     and there, for the events of controller-runtime's leader election,
//     create and patch on core events.
//
// As kubebuilder markers, for a Moose that owns ConfigMaps:
//
//	// +kubebuilder:rbac:groups=example.com,resources=moose,verbs=get;list;watch;patch
//	// +kubebuilder:rbac:groups=example.com,resources=moose/status,verbs=patch
//	// +kubebuilder:rbac:groups=example.com,resources=moose/finalizers,verbs=update
//	// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
//	// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
//	// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=moose.example.com,verbs=get
//
// Tests check the list: fsmtest's Options.Roles runs the operator with
// exactly the role that controller-gen generates from such markers, and
// every example's tests do so.
//
// Someone who only looks (kubectl fsm, the dashboard) needs get, list and
// watch on the machine's kind, get on customresourcedefinitions, and list
// on events.k8s.io events for an object's recent events.
//
// # Where mistakes are caught
//
// Each kind of mistake in a machine is caught as early as its kind allows:
//
//   - At compile time, by Go's types: a handler whose signature is not a
//     [Handler]'s, or that takes the [Request] of another object type.
//   - By kfsm vet, before the code runs (package fsmvet; also go vet
//     -vettool and golangci-lint): a Next with constant states that
//     leaves a state by an exit it does not declare, or moves to a state
//     that the machine does not declare, in the words of the run-time
//     refusal; and, as warnings, states that nothing moves to and exits
//     that no handler takes.
//   - By [Machine.Build] and SetupWithManager, when the machine is built:
//     the graph, with every problem listed (unknown targets, unreachable
//     states, states without an exit, a cycle in a pipeline...).
//   - By kfsm check (graph.Check), from the graph alone: states that an
//     object can reach and never leave for a place to rest, a deletion
//     path that can fail to end, a cycle that kfsm repeats for ever by
//     itself, a goal that some state cannot reach; each with the walk
//     that leads there.
//   - At run time, everything else: a Next whose state is computed is
//     refused with IllegalTransition (guarantee 1 below), a goal that no
//     path reaches is GoalUnreachable, a persisted state that the graph no
//     longer declares is UnknownState.
//   - By fsmtest's edge coverage (kfsm cover): the declared edges that no
//     test took, whose code has never run.
//
// # Guarantees
//
//  1. Only declared exits are taken. A Next to any other state is refused:
//     the state stays, Ready is False and Stalled True with reason
//     IllegalTransition, and an event and an error log say what happened.
//  2. Build and SetupWithManager refuse an invalid graph and list every
//     problem at once (a *graph.ValidationError).
//  3. kfsm writes the status only when it changed, at most once per
//     reconcile, and its own writes never trigger the next reconcile;
//     nor does an event of a version that a reconcile has already read.
//     Reconciling an object that has converged makes no API request and
//     records no event: the status is not written, and an unchanged
//     child's apply is not sent (the rule above).
//  4. status.observedGeneration and the Ready, Reconciling and Stalled
//     conditions follow the kstatus conventions.
//  5. After kfsm writes an object at resourceVersion R, it runs no handler
//     on any copy older than R; nor, once it leads or takes a slot, on one
//     older than the API server's then. It waits for the cache instead.
//  6. Once an object is being deleted, the deletion path runs from the
//     OnDelete state, whatever state the object was in. The finalizer is
//     added before any handler runs and removed only when a final state of
//     the deletion path is done. A machine without OnDelete adds none.
//  7. Nothing is stuck silently: a failed state is retried after its
//     backoff, never sooner; a Timeout edge moves an object that stays
//     too long, a RetriesThen edge moves one that fails too often; without
//     such an edge, exhausted Retries and Stop make the object Stalled,
//     with the reason and message, until its generation changes or a
//     retry is asked for. A state's failures count until its handler is
//     done or the object leaves the state: a Wait between two failures,
//     such as while an action that failed runs again, does not reset the
//     count or the backoff's growth; a new generation and a retry asked
//     with AnnotationRetry do.
//  8. A panic in a handler is recovered and reported like Fail.
//  9. Every transition is visible, as described above, once: only after
//     the status that records it is written. A status that cannot be
//     written is reported (an event, a log line, a metric, and a Stalled
//     condition if a smaller write gets through), and none of the walk's
//     transitions is counted.
//  10. Children are applied with server-side apply under the machine's
//     field owner and recorded in Status.Outputs. Pruning follows the rule
//     above: it never deletes a child that the latest complete answer
//     applied, nor an object without the parent's UID label, nor an
//     adopted one, and it finds children that a crash kept out of the
//     status. Apply never takes over an existing object unless the
//     handler adopts it. An undeclared child type is an error, never a
//     panic and never a write.
//
// Conflicts with other writers are retried without an error log. A
// handler whose transition is refused has its changes to the status
// discarded: only the refusal is written.
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
//   - Only kfsm writes the fields of Status; its status writes do not
//     check for concurrent writers of the status. Where the machine's
//     webhooks run, the API server enforces it.
//   - An action's work returns soon after its context ends, and its
//     Observe answers done only when the effect happened and not done only
//     when it did not: kfsm trusts both.
//
// # Caveats
//
//   - What handlers do outside the status can outlive the walk that did
//     it. When several states run in one reconcile and the status write
//     then fails, the object is still in the first state, and that state's
//     handler runs again in a world that a later state already changed (a
//     database the End state stopped, a child a later state applied). A
//     handler must accept the world as any state after it may have left it;
//     fsmtest's FailWrite and Conflicts faults find those that do not.
//   - A Wait without a delay runs the handler again only when the object
//     or something it watches changes. So does Done, unless the machine
//     resyncs ([Tuning.Resync]) to compare with a world that sends no
//     events.
//   - The metrics kfsm_objects, kfsm_stalled_objects and
//     kfsm_reconciling_objects count the objects this process reconciled
//     since it started (on a sharded replica, those of the slots it
//     holds).
//   - Typed children are applied with every field their JSON has, so a
//     field without omitempty is applied even at its zero value; pass an
//     *unstructured.Unstructured to apply exactly the fields you set.
//   - [Tuning.Redact] filters the texts kfsm takes from errors, panics and
//     Stop messages before it writes them to conditions, events, logs,
//     spans and the error it returns. It cannot filter what it does not
//     see: what handlers log themselves, errors that actions return to a
//     handler before the handler fails with them, or a secret the filter
//     does not recognise. Without it, an error's text goes everywhere as
//     it is. After the filter, every control character (C0, newlines and
//     tabs included, DEL and C1) becomes a space in the condition messages
//     kfsm makes of errors, panics and Stop messages, and in every event's
//     reason, action and note, Request.Event's included: each is one line,
//     and no escape sequence in it reaches a terminal that prints it.
//   - If someone removes kfsm's finalizer while the deletion path runs,
//     the object vanishes before the path is done. kfsm then deletes the
//     children that garbage collection cannot reach (cluster-scoped, or in
//     another namespace), as far as this process knew them, with an
//     OrphansDeleted event; what the deletion path would have cleaned up
//     outside the cluster stays.
//   - A paused object keeps its finalizer: deleting it waits until it is
//     unpaused.
//   - A For predicate that drops updates of annotations (such as
//     GenerationChangedPredicate alone) delays AnnotationRetry and
//     AnnotationPaused until a change it lets through.
//   - An action's outcome is recorded by the first walk after it ends, and
//     told to the handler once: the handler's answer is written together
//     with the record's removal. A Wait without a delay relies on the
//     completion to come back. A reconciler run without a manager
//     (Machine.Reconciler) has no controller's queue for it: whoever runs
//     it starts it as a source with a queue of its own, as fsmtest's step
//     driver does, and reconciles what the queue gets.
//   - A checkpoint returns once a walk wrote it, which a paused object
//     does not do until it is unpaused.
//   - A process that is frozen rather than dead (a paused VM, a
//     partition) may still be inside an action's external call while
//     another process takes the object over: the fence stops its writes
//     to the API server, not its calls elsewhere. The key or the Observe
//     is what keeps such an effect single.
//   - A persisted state that the graph no longer declares, with no
//     migration of [Machine.Version] to say where it went, is reported as
//     Stalled with reason UnknownState and kept as it is: kfsm does not
//     guess where the object should be.
//   - Leader election (controller-runtime's, client-go's) does not fence:
//     a leader that was frozen past its lease (a paused VM, a long GC, a
//     partition) writes until its next renewal fails, up to RenewDeadline
//     after it wakes, while the new leader already runs; the two then
//     answer each other's writes. Package failover measures it (59 to 166
//     writes after the handover). [FenceLeaderElection] closes the gap: the
//     process writes only within RenewDeadline of its last renewal, and
//     package failover's test finds no write of the old leader after the
//     handover with it. Its own limits are in its documentation.
//
// # Inside kfsm
//
// Which of the package's files and internal packages owns each mechanism,
// and the path of one reconcile through them, are in docs/architecture.md.
package fsm
