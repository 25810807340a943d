package autoupdate

// The permissions of the managed client operator, as fsm's package doc lists them
// for a machine: `make generate` writes them to rbac/role.yaml, and the
// tests run the operator with that role and nothing more.
//
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=managedclients,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=managedclients/status,verbs=patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=managedclients/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=managedclients.examples.kfsm.dev,verbs=get
