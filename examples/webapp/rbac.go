package webapp

// The permissions of the web app operator, as fsm's package doc lists them
// for a machine: `make generate` writes them to rbac/role.yaml, and the
// tests run the operator with that role and nothing more.
//
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=webapps,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=webapps/status,verbs=patch
// +kubebuilder:rbac:groups=examples.kfsm.dev,resources=webapps/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=webapps.examples.kfsm.dev,verbs=get
