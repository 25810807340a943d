package moose

// The permissions of the moose operator, as fsm's package doc lists them
// for a machine: `make generate` writes them to rbac/role.yaml, and the
// tests run the operator with that role and nothing more.
//
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=moose,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=moose/status,verbs=patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=moose/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=moose.examples.kfsm.dev,verbs=get
