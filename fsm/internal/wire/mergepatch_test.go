package wire

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

// randomValue returns a random JSON value without nulls: an object, an
// array or a scalar, drawn from few keys and values so that two of them
// share members often.
func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(6); {
	case n == 0 && depth < 3:
		return randomObject(r, depth+1)
	case n == 1 && depth < 3:
		out := make([]any, r.IntN(3))
		for i := range out {
			out[i] = randomValue(r, depth+1)
		}
		return out
	case n == 2:
		return r.IntN(3)
	case n == 3:
		return r.IntN(2) == 0
	default:
		return fmt.Sprint("v", r.IntN(3))
	}
}

func randomObject(r *rand.Rand, depth int) map[string]any {
	out := map[string]any{}
	for range r.IntN(5) {
		out[fmt.Sprint("k", r.IntN(5))] = randomValue(r, depth)
	}
	return out
}

// mutate returns a copy of obj with some members changed, removed or
// added, at any depth.
func mutate(r *rand.Rand, obj map[string]any, depth int) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		switch r.IntN(6) {
		case 0: // removed
		case 1:
			out[k] = randomValue(r, depth)
		case 2:
			if sub, ok := v.(map[string]any); ok {
				out[k] = mutate(r, sub, depth+1)
				continue
			}
			out[k] = v
		default:
			out[k] = v
		}
	}
	if r.IntN(3) == 0 {
		out[fmt.Sprint("k", r.IntN(7))] = randomValue(r, depth)
	}
	return out
}

func decode(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return v
}

// MergePatch's patch is the one a general merge patch makes, and applied to the
// original it gives the changed document.
func TestMergePatchIsTheGeneralOnes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		from := randomObject(r, 0)
		to := mutate(r, from, 0)
		if i%10 == 0 {
			to = from
		}
		fromJSON, _ := json.Marshal(from)
		toJSON, _ := json.Marshal(to)
		got, err := MergePatch(fromJSON, toJSON)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jsonpatch.CreateMergePatch(fromJSON, toJSON)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decode(t, got), decode(t, want)) {
			t.Fatalf("from %s to %s: patch %s, want %s", fromJSON, toJSON, got, want)
		}
		applied, err := jsonpatch.MergePatch(fromJSON, got)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decode(t, applied), decode(t, toJSON)) {
			t.Fatalf("from %s, patch %s gives %s, want %s", fromJSON, got, applied, toJSON)
		}
	}
}

func TestMergePatchRefusesWhatIsNotAnObject(t *testing.T) {
	for _, c := range [][2]string{{`[]`, `{}`}, {`{}`, `3`}, {`null`, `{}`}, {``, `{}`}} {
		if _, err := MergePatch([]byte(c[0]), []byte(c[1])); err == nil {
			t.Errorf("MergePatch(%s, %s) gave no error", c[0], c[1])
		}
	}
}
