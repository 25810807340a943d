// Package wire makes the bodies of kfsm's writes and reads their
// answers. For a machine's children (apply.go), it makes the content of
// an apply from what the author set, trims what an apply must not carry,
// digests what it sends, tells from the API server's answer whether
// someone else wrote the object meanwhile, and gives the answer back to
// the author; and it moves the fields of a child that kfsm created from
// the create's record to kfsm's apply on the child's first change
// (ownership.go). For the machine's own objects (status.go, mergepatch.go),
// it finds the status of any Go type by reflection, compares and copies
// it, and makes the merge patch that writes it.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Digest is the first half of the SHA-256 of an apply's body: kfsm
// remembers it for each child it applies, in memory and in the status, to
// tell an apply that would change nothing.
type Digest [16]byte

// DigestOf digests the body of an apply.
func DigestOf(body []byte) Digest {
	sum := sha256.Sum256(body)
	return Digest(sum[:16])
}

// String is the digest as status.outputs records it.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// OthersWrote reports whether after, what an apply of body answered,
// differs from before, the copy of the object read ahead of the apply, in
// anything that body does not set, beyond the metadata that every write
// changes. Then someone else wrote the object in between: if the apply
// changed nothing, the version in its answer is theirs, and its watch
// event is news still to come. What differs inside a value or a list
// that body sets counts as the apply's, and so does what the server
// defaults there.
func OthersWrote(before, after client.Object, body []byte) bool {
	was, err := decoded(before)
	if err != nil {
		return true
	}
	is, err := decoded(after)
	if err != nil {
		return true
	}
	var applied map[string]any
	if err := json.Unmarshal(body, &applied); err != nil {
		return true
	}
	return differsOutside(was, is, applied)
}

// decoded is obj as decoded JSON, without the metadata that every write
// changes.
func decoded(obj client.Object) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "resourceVersion")
		delete(meta, "managedFields")
		delete(meta, "generation")
	}
	return m, nil
}

// differsOutside reports whether a and b, decoded JSON, differ anywhere
// that applied, the part of an apply request at the same place, does not
// set.
func differsOutside(a, b any, applied any) bool {
	set, ok := applied.(map[string]any)
	if applied != nil && !ok {
		return false // a value or a list that the apply set
	}
	ma, aok := a.(map[string]any)
	mb, bok := b.(map[string]any)
	if set == nil || (a != nil && !aok) || (b != nil && !bok) {
		return !reflect.DeepEqual(a, b)
	}
	for k, va := range ma {
		if differsOutside(va, mb[k], set[k]) {
			return true
		}
	}
	for k, vb := range mb {
		if _, ok := ma[k]; !ok && differsOutside(nil, vb, set[k]) {
			return true
		}
	}
	return false
}

// Trim removes from a JSON object, as encoding/json writes it, the
// members that an apply request must not carry: the top-level "status",
// which belongs to the status subresource, and every member whose value
// is null at any depth, such as the creationTimestamp of a pod template.
// Applied, a null would claim a field that the author never set.
//
// It works on the encoded bytes: decoding the object into maps and
// encoding it again costs several times as much.
func Trim(src []byte) ([]byte, error) {
	dst := make([]byte, 0, len(src))
	dst, err := trimItems(dst, src, true, true)
	if err != nil {
		return nil, fmt.Errorf("an apply request must be a JSON object: %w", err)
	}
	return dst, nil
}

func trimItems(dst, src []byte, keyed, top bool) ([]byte, error) {
	open, end := byte('['), byte(']')
	if keyed {
		open, end = '{', '}'
	}
	dst = append(dst, open)
	n := 0
	err := items(src, keyed, func(key, value []byte) error {
		if keyed && (string(value) == "null" || top && string(key) == `"status"`) {
			return nil
		}
		if n++; n > 1 {
			dst = append(dst, ',')
		}
		if keyed {
			dst = append(append(dst, key...), ':')
		}
		var err error
		switch value[0] {
		case '{', '[':
			dst, err = trimItems(dst, value, value[0] == '{', false)
		default:
			dst = append(dst, value...)
		}
		return err
	})
	return append(dst, end), err
}

var errTruncated = errors.New("truncated JSON")

// items calls yield with each member of src, a JSON object (keyed), its
// key and its value as they are encoded, or with each element of src, an
// array. Nothing may follow src's end.
func items(src []byte, keyed bool, yield func(key, value []byte) error) error {
	open, end := byte('['), byte(']')
	if keyed {
		open, end = '{', '}'
	}
	i := skipSpace(src, 0)
	if i >= len(src) || src[i] != open {
		return fmt.Errorf("expected %c at offset %d", open, i)
	}
	for i, n := skipSpace(src, i+1), 0; ; i, n = skipSpace(src, i), n+1 {
		if i >= len(src) {
			return errTruncated
		}
		if src[i] == end {
			if i = skipSpace(src, i+1); i != len(src) {
				return fmt.Errorf("unexpected data after the end at offset %d", i)
			}
			return nil
		}
		if n > 0 {
			if src[i] != ',' {
				return fmt.Errorf("expected , or %c at offset %d", end, i)
			}
			i = skipSpace(src, i+1)
		}
		var key []byte
		if keyed {
			k, err := skipString(src, i)
			if err != nil {
				return err
			}
			key = src[i:k]
			if i = skipSpace(src, k); i >= len(src) || src[i] != ':' {
				return fmt.Errorf("expected : at offset %d", i)
			}
			i = skipSpace(src, i+1)
		}
		j, err := skipValue(src, i)
		if err != nil {
			return err
		}
		if err := yield(key, src[i:j]); err != nil {
			return err
		}
		i = j
	}
}

// skipValue returns the offset just past the JSON value at i.
func skipValue(src []byte, i int) (int, error) {
	if i >= len(src) {
		return 0, errTruncated
	}
	switch src[i] {
	case '"':
		return skipString(src, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(src); j++ {
			switch src[j] {
			case '"':
				end, err := skipString(src, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errTruncated
	}
	j := i
	for j < len(src) && bytes.IndexByte([]byte(",}] \t\r\n"), src[j]) < 0 {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("expected a value at offset %d", i)
	}
	return j, nil
}

// skipString returns the offset just past the JSON string at i.
func skipString(src []byte, i int) (int, error) {
	if i >= len(src) || src[i] != '"' {
		return 0, fmt.Errorf("expected a string at offset %d", i)
	}
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errTruncated
}

func skipSpace(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\n' || src[i] == '\r') {
		i++
	}
	return i
}

// Content is the child as an apply request will carry it, before Trim
// leaves out its status and nulls: a copy of what the author
// set, with the type filled in and the metadata that the server sets
// left out.
func Content(child client.Object, gvk schema.GroupVersionKind) (client.Object, error) {
	if _, ok := child.(runtime.Unstructured); ok {
		// A JSON round trip rather than a deep copy, which would panic on
		// content that holds Go ints.
		data, err := json.Marshal(child)
		if err != nil {
			return nil, err
		}
		content := map[string]any{}
		if err := utiljson.Unmarshal(data, &content); err != nil {
			return nil, err
		}
		child = &unstructured.Unstructured{Object: content}
	} else {
		child = child.DeepCopyObject().(client.Object)
	}
	child.SetCreationTimestamp(metav1.Time{})
	child.SetResourceVersion("")
	child.SetUID("")
	child.SetGeneration(0)
	child.SetManagedFields(nil)
	child.SetSelfLink("")
	child.SetDeletionTimestamp(nil)
	child.SetDeletionGracePeriodSeconds(nil)
	child.GetObjectKind().SetGroupVersionKind(gvk)
	return child, nil
}

// CopyInto gives the author the child as the server has it: its UID,
// its defaults and its status. src is not used afterwards.
func CopyInto(child, src client.Object, gvk schema.GroupVersionKind) error {
	if reflect.TypeOf(child) == reflect.TypeOf(src) {
		reflect.ValueOf(child).Elem().Set(reflect.ValueOf(src).Elem())
		child.GetObjectKind().SetGroupVersionKind(gvk)
		return nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
	if err != nil {
		return err
	}
	if cu, ok := child.(*unstructured.Unstructured); ok {
		cu.Object = content
	} else {
		v := reflect.ValueOf(child).Elem()
		v.Set(reflect.Zero(v.Type()))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, child); err != nil {
			return err
		}
	}
	child.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}
