package database

// The permissions of the database operator, as fsm's package doc lists them
// for a machine: `make generate` writes them to rbac/role.yaml, and the
// tests run the operator with that role and nothing more.
//
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=databases/status,verbs=patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=databases/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=databases.examples.kfsm.dev,verbs=get
