package fsm

// The bounds of Status, for the tests that hold the CRD and kfsm to them.
const (
	MaxStateName      = maxStateName
	MaxConditions     = maxConditions
	MaxPipelineStates = maxPipelineStates
	MaxHistory        = maxHistory
	MaxOutputs        = maxOutputs
	MaxRetryMark      = maxRetryMark
	MaxGroup          = maxGroup
	MaxKind           = maxKind
	MaxNamespace      = maxNamespace
	MaxName           = maxName
	MaxUID            = maxUID
	MaxVersion        = maxVersion
)
