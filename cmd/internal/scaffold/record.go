package scaffold

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// recordFile is the project's record of itself, at its root.
const recordFile = "PROJECT"

// recordLayout names the layout of the projects that this package writes.
const recordLayout = "kfsm.dev/v1alpha1"

// record is what PROJECT holds: what kfsm create api needs to know of a
// project that kfsm init wrote.
type record struct {
	Name, Module, Group string
	Kinds               []recordKind
}

type recordKind struct{ Kind, Version string }

func (r record) has(k string) bool {
	return slices.ContainsFunc(r.Kinds, func(rk recordKind) bool { return rk.Kind == k })
}

func (r record) hasVersion(v string) bool {
	return slices.ContainsFunc(r.Kinds, func(rk recordKind) bool { return rk.Version == v })
}

const recordHeader = `# The record of this project that kfsm keeps: kfsm init wrote it, and
# kfsm create api adds each kind that it scaffolds. Keep it with the code.
`

// marshal writes r as YAML, in the one shape that parseRecord reads.
func (r record) marshal() []byte {
	var b bytes.Buffer
	b.WriteString(recordHeader)
	fmt.Fprintf(&b, "layout: %s\nname: %s\nmodule: %s\ngroup: %s\nkinds:\n", recordLayout, r.Name, r.Module, r.Group)
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "  - kind: %s\n    version: %s\n", k.Kind, k.Version)
	}
	return b.Bytes()
}

// parseRecord reads what marshal writes: comments, the keys of record in
// any order, and the kinds, as a list of maps of kind and version. It
// reads no other YAML, and says so.
func parseRecord(src []byte) (record, error) {
	var r record
	seen := map[string]bool{}
	inKinds := false
	for i, line := range strings.Split(string(src), "\n") {
		bad := func(why string) error {
			return fmt.Errorf("%s line %d: %s: %q", recordFile, i+1, why, line)
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		item := strings.HasPrefix(trimmed, "- ")
		key, value, ok := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		if !ok {
			return record{}, bad("not a key and a value")
		}
		value = strings.TrimSpace(value)
		if unquoted, err := strconv.Unquote(value); err == nil {
			value = unquoted
		}
		indented := line != trimmed
		switch {
		case !indented && key == "kinds" && value == "":
			inKinds = true
			seen[key] = true
			continue
		case !indented:
			inKinds = false
		case !inKinds:
			return record{}, bad("indented outside kinds")
		case item:
			r.Kinds = append(r.Kinds, recordKind{})
		case len(r.Kinds) == 0:
			return record{}, bad("not in an item of kinds")
		}
		if inKinds {
			k := &r.Kinds[len(r.Kinds)-1]
			switch key {
			case "kind":
				k.Kind = value
			case "version":
				k.Version = value
			default:
				return record{}, bad("a kind has a kind and a version only")
			}
			continue
		}
		if seen[key] {
			return record{}, bad("a second " + key)
		}
		seen[key] = true
		switch key {
		case "layout":
			if value != recordLayout {
				return record{}, bad("this kfsm writes the layout " + recordLayout + " only")
			}
		case "name":
			r.Name = value
		case "module":
			r.Module = value
		case "group":
			r.Group = value
		default:
			return record{}, bad("unknown key " + key)
		}
	}
	var missing []string
	for _, key := range []string{"layout", "name", "module", "group", "kinds"} {
		if !seen[key] {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return record{}, fmt.Errorf("%s lacks %s", recordFile, strings.Join(missing, ", "))
	}
	for _, k := range r.Kinds {
		if k.Kind == "" || k.Version == "" {
			return record{}, fmt.Errorf("%s has a kind without a kind or a version", recordFile)
		}
	}
	return r, nil
}
