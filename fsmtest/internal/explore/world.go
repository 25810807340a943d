package explore

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
)

// World says what two correct runs of a scenario may differ in, which
// their snapshots and the keys of their points leave out.
type World struct {
	Namespace string   // the run's own, which a name or a message may hold
	Ignore    []string // fields the test leaves out, wherever they appear (fsmtest.Ignore)
}

// Left out: what differs between two correct runs.
var (
	variable = map[string]bool{
		"lastTransitionTime": true, "time": true, "stateSince": true, "retryAt": true,
		"uid": true, "resourceVersion": true, "creationTimestamp": true,
		"clusterIP": true, "clusterIPs": true, "nodePort": true, "healthCheckNodePort": true,
		fsm.LabelOwnerUID:  true,
		sharding.LabelSlot: true, // a slot of the parent's UID, on a sharded machine's children
		"appliedDigest":    true, // of content that holds the parent's UID
	}
	rfc3339 = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)
	uuid    = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
)

// Normalize leaves out of v, an object decoded from JSON, what differs
// between two correct runs: times, UIDs, versions, allocated addresses,
// the ignored fields, and the run's namespace.
func (w World) Normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if !variable[k] && !slices.Contains(w.Ignore, k) {
				out[k] = w.Normalize(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = w.Normalize(x)
		}
		return out
	case string:
		if rfc3339.MatchString(v) {
			return "<time>"
		}
		return strings.ReplaceAll(v, w.Namespace, "<namespace>")
	}
	return v
}

// WithoutPath leaves out of a status how the object got where it is: the
// history of transitions, the failure count, and of each action's record
// what names its run rather than what it did: its key, made of the
// object's UID, and its times, one of which, the heartbeat, one run may
// have and another not.
func WithoutPath(status any) any {
	m, ok := status.(map[string]any)
	if !ok {
		return status
	}
	out := maps.Clone(m)
	delete(out, "history")
	delete(out, "failures")
	if actions, ok := out["actions"].([]any); ok {
		records := make([]any, len(actions))
		for i, a := range actions {
			if a, ok := a.(map[string]any); ok {
				rec := maps.Clone(a)
				for _, k := range []string{"key", "started", "heartbeat", "ended"} {
					delete(rec, k)
				}
				records[i] = rec
				continue
			}
			records[i] = a
		}
		out["actions"] = records
	}
	return out
}

// withoutStatus returns an object's JSON without its status.
func withoutStatus(object []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(object, &m) != nil {
		return object
	}
	delete(m, "status")
	out, err := json.Marshal(m)
	if err != nil {
		return object
	}
	return out
}

// withoutWords leaves out of v the messages and errors that say in words
// what its reasons and states say in short: a failure's text names the
// write that failed and the server's address, which differ between two
// runs that are in the same state.
func withoutWords(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if k != "message" && k != "error" {
				out[k] = withoutWords(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutWords(x)
		}
		return out
	}
	return v
}
