package wire

import (
	"bytes"
	"fmt"
	"slices"
)

// A general merge patch decodes both documents into maps of interfaces
// and compares them value by value. The statuses that kfsm writes are
// encoded by encoding/json from the same Go type, whose encoding of equal
// values is equal bytes: a member whose bytes did not change is left out
// unread, only objects whose bytes changed are looked into, and the patch
// is written as it is found, from slices of the two encodings.

// MergePatch returns the merge patch (RFC 7386) that turns the JSON
// object from into to: the members of to that changed, the members of
// from that to lacks as null, and the objects that are members of both
// as patches of their own. Both must be objects as encoding/json writes
// them: equal values in equal bytes, or the patch merely sets a few
// members to what they already are, and keys in one spelling.
func MergePatch(from, to []byte) ([]byte, error) {
	if len(from) == 0 || len(to) == 0 || from[0] != '{' || to[0] != '{' {
		return nil, fmt.Errorf("a merge patch is made between two JSON objects, not %.20q and %.20q", from, to)
	}
	return appendDiff(make([]byte, 0, len(to)), from, to), nil
}

// member is a member of a JSON object, its key and its value as they are
// encoded.
type member struct{ key, value []byte }

func (m member) sameKey(o member) bool { return bytes.Equal(m.key, o.key) }

func appendDiff(dst, from, to []byte) []byte {
	var f, t []member
	items(from, true, func(k, v []byte) { f = append(f, member{k, v}) })
	items(to, true, func(k, v []byte) { t = append(t, member{k, v}) })
	dst = append(dst, '{')
	n := 0
	add := func(key []byte) {
		if n++; n > 1 {
			dst = append(dst, ',')
		}
		dst = append(append(dst, key...), ':')
	}
	for _, m := range t {
		i := slices.IndexFunc(f, m.sameKey)
		switch {
		case i >= 0 && bytes.Equal(f[i].value, m.value):
		case i >= 0 && f[i].value[0] == '{' && m.value[0] == '{':
			add(m.key)
			dst = appendDiff(dst, f[i].value, m.value)
		default:
			add(m.key)
			dst = append(dst, m.value...)
		}
	}
	for _, m := range f {
		if !slices.ContainsFunc(t, m.sameKey) {
			add(m.key)
			dst = append(dst, "null"...)
		}
	}
	return append(dst, '}')
}
