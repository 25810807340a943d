package statusfield

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// A general merge patch decodes both documents into maps of interfaces
// and compares them value by value. The statuses that kfsm writes are
// encoded by encoding/json from the same Go type, whose encoding of equal
// values is equal bytes, so a member whose bytes did not change can be
// left out unread, and only objects whose bytes changed are looked into.

var null = json.RawMessage("null")

// MergePatch returns the merge patch that turns the JSON object from into to:
// the members of to that changed, the members of from that to lacks as
// null, and the objects that are members of both as patches of their
// own. Both must be objects; equal values must be equal bytes, as
// encoding/json writes them, or the patch merely sets a few members to
// what they already are.
func MergePatch(from, to []byte) ([]byte, error) {
	patch, err := diff(from, to)
	if err != nil {
		return nil, err
	}
	return json.Marshal(patch)
}

// diff returns the patch as a map whose values are the members' encodings
// or, for objects that changed, patches of their own: encoding/json
// writes it once, at the end.
func diff(from, to []byte) (map[string]any, error) {
	var f, t map[string]json.RawMessage
	if err := json.Unmarshal(from, &f); err != nil {
		return nil, fmt.Errorf("the original: %w", err)
	}
	if err := json.Unmarshal(to, &t); err != nil {
		return nil, fmt.Errorf("the changed document: %w", err)
	}
	patch := map[string]any{}
	for k := range f {
		if _, ok := t[k]; !ok {
			patch[k] = null
		}
	}
	for k, tv := range t {
		fv, ok := f[k]
		switch {
		case ok && bytes.Equal(fv, tv):
		case ok && isObject(fv) && isObject(tv):
			sub, err := diff(fv, tv)
			if err != nil {
				return nil, err
			}
			patch[k] = sub
		default:
			patch[k] = tv
		}
	}
	return patch, nil
}

// object says whether the JSON value v is an object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}
