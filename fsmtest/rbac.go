package fsmtest

// The ServiceAccount that operators run as when Options.Roles is set, and
// its user name, as the API server and admission webhooks see it.
const (
	OperatorNamespace      = "fsmtest-operator"
	OperatorServiceAccount = "operator"
	OperatorUser           = "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
)
