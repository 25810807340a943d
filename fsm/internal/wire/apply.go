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

// DigestOfContent digests content, whose status is cleared, by its
// protobuf encoding where its type has one, as the built-in kinds do (the
// same content gives the same bytes: maps go in the order of their keys),
// and its apiVersion: at a fraction of the cost of the JSON of its apply,
// which a child left as it is never needs. Content of another type, such
// as a CRD's Go type or unstructured content, is digested by its apply
// body, which it returns too.
func DigestOfContent(content runtime.Object, gvk schema.GroupVersionKind) (d Digest, body []byte, err error) {
	if m, ok := content.(interface {
		Size() int
		MarshalToSizedBuffer([]byte) (int, error)
	}); ok {
		version, n := gvk.GroupVersion().String(), m.Size()
		b := make([]byte, n, n+1+len(version))
		_, err := m.MarshalToSizedBuffer(b)
		// The apiVersion after a 0 byte, which it never holds.
		return DigestOf(append(append(b, 0), version...)), nil, err
	}
	body, err = Body(content)
	return DigestOf(body), body, err
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
	was, errBefore := decoded(before)
	is, errAfter := decoded(after)
	var applied map[string]any
	if err := errors.Join(errBefore, errAfter, json.Unmarshal(body, &applied)); err != nil {
		return true
	}
	return differsOutside(was, is, applied)
}

// decoded is obj as decoded JSON, without the metadata that every write
// changes. It converts a copy: the converter hands out an unstructured
// object's own map, and obj may be the cache's (both objects come from
// the API server, so their values are JSON's, which a deep copy takes).
func decoded(obj client.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj.DeepCopyObject())
	if err != nil {
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

// Body is the body of an apply of content: its JSON, without the members
// that an apply request must not carry: the top-level "status", which
// belongs to the status subresource, and every member whose value is null
// at any depth, such as the creationTimestamp of a pod template. Applied,
// a null would claim a field that the author never set.
//
// It trims the encoded bytes, which encoding/json writes compact and
// valid: decoding the object into maps and encoding it again costs five
// times as much.
func Body(content any) ([]byte, error) {
	src, err := json.Marshal(content)
	if err != nil {
		return nil, err
	}
	if src[0] != '{' {
		return nil, fmt.Errorf("an apply request must be a JSON object, not %.20s", src)
	}
	return trimmed(make([]byte, 0, len(src)), src, true), nil
}

// trimmed appends to dst src, an object or an array, without the nulls
// of its members, nor its status if it is the top-level object.
func trimmed(dst, src []byte, top bool) []byte {
	dst = append(dst, src[0])
	keyed, n := src[0] == '{', 0
	items(src, keyed, func(key, value []byte) {
		if keyed && (string(value) == "null" || top && string(key) == `"status"`) {
			return
		}
		if n++; n > 1 {
			dst = append(dst, ',')
		}
		if keyed {
			dst = append(append(dst, key...), ':')
		}
		if value[0] == '{' || value[0] == '[' {
			dst = trimmed(dst, value, false)
		} else {
			dst = append(dst, value...)
		}
	})
	return append(dst, src[len(src)-1])
}

// items calls yield with each member of src, a JSON object (keyed), its
// key and its value as they are encoded, or with each element of src, an
// array. src is compact and valid, as encoding/json writes it.
func items(src []byte, keyed bool, yield func(key, value []byte)) {
	for i := 1; i < len(src)-1; {
		var key []byte
		if keyed {
			k := skipString(src, i)
			key, i = src[i:k], k+1 // past the colon
		}
		j := skipValue(src, i)
		yield(key, src[i:j])
		i = j + 1 // past the comma
	}
}

// skipValue returns the offset just past the JSON value at i.
func skipValue(src []byte, i int) int {
	switch src[i] {
	case '"':
		return skipString(src, i)
	case '{', '[':
		for j, depth := i, 0; ; j++ {
			switch src[j] {
			case '"':
				j = skipString(src, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for src[j] != ',' && src[j] != '}' && src[j] != ']' {
		j++
	}
	return j
}

// skipString returns the offset just past the JSON string at i.
func skipString(src []byte, i int) int {
	for j := i + 1; ; j++ {
		switch src[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
}

// Content is the child as an apply request will carry it, before Body
// leaves out its nulls: a copy of what the author set, with the type
// filled in and the metadata and the status that the server sets left
// out (unstructured content keeps its status until Body).
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
		if f := Field(child); f.IsValid() && f.CanSet() {
			f.SetZero() // an apply carries no status, nor does a create
		}
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
