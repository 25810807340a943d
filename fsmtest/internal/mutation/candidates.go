package mutation

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Bounds on what a schema yields, so that a large or self-referring
// schema (possible in a CustomResourceDefinition built in Go) costs little.
const (
	maxDepth      = 8     // levels of fields under .spec
	maxCandidates = 1000  // candidates of one schema
	maxElements   = 100   // elements of an array built at its maxItems
	maxStringLen  = 16384 // characters of a string built at its maxLength
)

var (
	errNoCRD           = errors.New("no CustomResourceDefinition")
	errNoServedVersion = errors.New("it serves no version")
	errNoSchema        = errors.New("it has no openAPIV3Schema")
	errNoSpec          = errors.New("its schema has no spec property")
	errSpecNotObject   = errors.New("its spec is not an object")
)

// op is what a candidate does to its field.
type op int

const (
	set        op = iota // to the candidate's value
	remove               // the field
	flip                 // a boolean
	appendItem           // to an array, built from the item schema
	addKey               // to a map, its value built from the schema
	removeKey            // from a map: the first key
)

// Candidate is one change of an object's spec that the schema suggests.
type Candidate struct {
	at    []step
	op    op
	value any // for set
	what  string
	item  *apiextensionsv1.JSONSchemaProps // what appendItem and addKey build
}

// step is one step of a path from .spec.
type step struct {
	name  string // a property, or a map's key
	index int    // an array's element
	kind  stepKind
}

type stepKind int

const (
	property stepKind = iota
	element
	key
)

// path renders at as a JSONPath that kubectl takes, .spec.tiers[0].name
// or .spec.labels['app\.kubernetes\.io/name'].
// An element or a key not known yet (of an append, of a key added or
// removed) is [*].
func path(at []step) string {
	var b strings.Builder
	b.WriteString(".spec")
	for _, s := range at {
		switch {
		case s.kind == element && s.index < 0, s.kind == key && s.name == "":
			b.WriteString("[*]")
		case s.kind == element:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case s.kind == key || !plainName(s.name):
			b.WriteString("['" + strings.ReplaceAll(s.name, ".", `\.`) + "']")
		default:
			b.WriteString("." + s.name)
		}
	}
	return b.String()
}

// plainName reports whether name can follow a dot in a JSONPath.
func plainName(name string) bool {
	plain := func(r rune) bool {
		return r == '_' || r == '-' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return name != "" && strings.IndexFunc(name, func(r rune) bool { return !plain(r) }) < 0
}

// under is at with s appended, sharing nothing with at.
func under(at []step, s step) []step { return append(slices.Clone(at), s) }

// generator walks a schema and collects candidates, each once.
type generator struct {
	out  []Candidate
	seen map[string]bool
}

func (g *generator) full() bool { return len(g.out) >= maxCandidates }

func (g *generator) add(c Candidate) {
	value, _ := json.Marshal(c.value)
	id := fmt.Sprintf("%s %d %s", path(c.at), c.op, value)
	if g.full() || g.seen[id] {
		return
	}
	g.seen[id] = true
	g.out = append(g.out, c)
}

func (g *generator) set(at []step, v any, what string) {
	g.add(Candidate{at: at, op: set, value: v, what: what})
}

// children collects the candidates of an object's properties, in the
// order of their names, and of an array's first element.
func (g *generator) children(s *apiextensionsv1.JSONSchemaProps, at []step, depth int) {
	if item := itemSchema(s); item != nil {
		g.field(item, under(at, step{kind: element}), true, depth+1)
		return
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		prop := s.Properties[name]
		g.field(&prop, under(at, step{name: name}), slices.Contains(s.Required, name), depth+1)
	}
}

// field collects the candidates of one field: its default, the values
// its type and bounds suggest, null, its removal, then its children's.
func (g *generator) field(s *apiextensionsv1.JSONSchemaProps, at []step, required bool, depth int) {
	if s == nil || depth > maxDepth || g.full() {
		return
	}
	if v, ok := decode(s.Default); ok {
		g.set(at, v, "the default, "+show(v))
	}
	switch {
	case len(s.Enum) > 0:
		for _, e := range s.Enum {
			if v, ok := decode(&e); ok {
				g.set(at, v, show(v)+", of the enum")
			}
		}
	case s.XIntOrString:
		g.set(at, int64(1), "an int, 1")
		g.set(at, "50%", "a string, 50%")
	case s.Type == "integer":
		g.integer(s, at)
	case s.Type == "number":
		g.number(s, at)
	case s.Type == "string":
		g.str(s, at)
	case s.Type == "boolean":
		g.add(Candidate{at: at, op: flip, what: "flipped"})
	case s.Type == "array":
		g.array(s, at, depth)
	case s.Type == "object":
		g.object(s, at, depth)
	}
	if v, ok := decode(s.Example); ok {
		g.set(at, v, "the example, "+show(v))
	}
	if s.Nullable {
		g.set(at, nil, "null")
	}
	if !required && s.Default == nil {
		g.add(Candidate{at: at, op: remove, what: "removed"})
	}
	if s.Type == "object" || s.Type == "array" {
		g.children(s, at, depth)
	}
}

func (g *generator) integer(s *apiextensionsv1.JSONSchemaProps, at []step) {
	lo, hasLo, hi, hasHi := intBounds(s)
	switch {
	case hasLo && s.ExclusiveMinimum:
		g.set(at, lo, fmt.Sprintf("just above the exclusive minimum, %d", lo))
	case hasLo:
		g.set(at, lo, fmt.Sprintf("the minimum, %d", lo))
	case !hasHi || hi >= -1:
		g.set(at, int64(-1), "negative, -1")
	}
	switch {
	case hasHi && s.ExclusiveMaximum:
		g.set(at, hi, fmt.Sprintf("just below the exclusive maximum, %d", hi))
	case hasHi:
		g.set(at, hi, fmt.Sprintf("the maximum, %d", hi))
	case s.Format == "int32":
		g.set(at, int64(math.MaxInt32), fmt.Sprintf("the largest int32, %d", math.MaxInt32))
	default:
		g.set(at, int64(math.MaxInt64), fmt.Sprintf("the largest int64, %d", int64(math.MaxInt64)))
	}
	if (!hasLo || lo <= 0) && (!hasHi || hi >= 0) {
		g.set(at, int64(0), "zero")
	}
	if hasLo && hasHi && hi-lo >= 2 {
		mid := lo + (hi-lo)/2
		g.set(at, mid, fmt.Sprintf("the middle, %d", mid))
	}
}

// intBounds are the least and the greatest integers that s allows.
func intBounds(s *apiextensionsv1.JSONSchemaProps) (lo int64, hasLo bool, hi int64, hasHi bool) {
	if s.Minimum != nil {
		m := math.Ceil(*s.Minimum)
		if s.ExclusiveMinimum && m == *s.Minimum {
			m++
		}
		lo, hasLo = clampInt(m), true
	}
	if s.Maximum != nil {
		m := math.Floor(*s.Maximum)
		if s.ExclusiveMaximum && m == *s.Maximum {
			m--
		}
		hi, hasHi = clampInt(m), true
	}
	return lo, hasLo, hi, hasHi
}

func clampInt(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

func (g *generator) number(s *apiextensionsv1.JSONSchemaProps, at []step) {
	lo, hi := numBounds(s)
	switch {
	case s.Minimum != nil && s.ExclusiveMinimum:
		g.set(at, lo, "just above the exclusive minimum, "+show(lo))
	case s.Minimum != nil:
		g.set(at, lo, "the minimum, "+show(lo))
	default:
		g.set(at, -1.5, "negative, -1.5")
	}
	switch {
	case s.Maximum != nil && s.ExclusiveMaximum:
		g.set(at, hi, "just below the exclusive maximum, "+show(hi))
	case s.Maximum != nil:
		g.set(at, hi, "the maximum, "+show(hi))
	default:
		g.set(at, 1e9, "large, 1e9")
	}
	if lo <= 0 && hi >= 0 {
		g.set(at, 0.0, "zero")
	}
	if s.Minimum != nil && s.Maximum != nil && lo < hi {
		mid := lo + (hi-lo)/2
		g.set(at, mid, "the middle, "+show(mid))
	}
}

// numBounds are the least and the greatest numbers that s allows, or
// infinities.
func numBounds(s *apiextensionsv1.JSONSchemaProps) (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(1)
	if s.Minimum != nil {
		lo = *s.Minimum
		if s.ExclusiveMinimum {
			lo = math.Nextafter(lo, hi)
		}
	}
	if s.Maximum != nil {
		hi = *s.Maximum
		if s.ExclusiveMaximum {
			hi = math.Nextafter(hi, lo)
		}
	}
	return lo, hi
}

// formats are a valid value of each string format that the API server
// checks and that a field is likely to have.
var formats = map[string]string{
	"date-time": "2030-01-01T00:00:00Z",
	"date":      "2030-01-01",
	"duration":  "1h",
	"uuid":      "6a2f41a3-c54c-fce8-32d2-0324e1c32e22",
	"hostname":  "example.com",
	"ipv4":      "192.0.2.1",
	"ipv6":      "2001:db8::1",
	"cidr":      "192.0.2.0/24",
	"email":     "someone@example.com",
	"uri":       "https://example.com/",
	"byte":      "a2ZzbQ==",
}

func (g *generator) str(s *apiextensionsv1.JSONSchemaProps, at []step) {
	least := int64(0)
	if s.MinLength != nil {
		least = *s.MinLength
	}
	if v, ok := formats[s.Format]; ok {
		g.set(at, v, "a "+s.Format+", "+v)
	}
	if least == 0 {
		g.set(at, "", "empty")
	}
	if _, ok := formats[s.Format]; ok {
		return // a string of a's would not be one
	}
	if least > 0 && least <= maxStringLen {
		g.set(at, strings.Repeat("a", int(least)), "the shortest, "+count(least, "character"))
	}
	if s.MaxLength != nil && *s.MaxLength > least && *s.MaxLength <= maxStringLen {
		g.set(at, strings.Repeat("a", int(*s.MaxLength)), "the longest, "+count(*s.MaxLength, "character"))
	}
}

func (g *generator) array(s *apiextensionsv1.JSONSchemaProps, at []step, depth int) {
	item := itemSchema(s)
	least := int64(0)
	if s.MinItems != nil {
		least = *s.MinItems
	}
	if least == 0 {
		g.set(at, []any{}, "emptied")
	} else if v, ok := elements(item, least, depth); ok {
		g.set(at, v, "at minItems, "+count(least, "element"))
	}
	if s.MaxItems != nil && *s.MaxItems > least {
		if v, ok := elements(item, *s.MaxItems, depth); ok {
			g.set(at, v, "at maxItems, "+count(*s.MaxItems, "element"))
		}
	}
	if item != nil {
		g.add(Candidate{at: at, op: appendItem, item: item, what: "an element appended"})
	}
}

func (g *generator) object(s *apiextensionsv1.JSONSchemaProps, at []step, depth int) {
	if v, ok := build(s, 0, depth); ok {
		what := "only its required fields"
		if len(s.Properties) == 0 {
			what = "emptied"
		}
		g.set(at, v, what)
	}
	if values := mapValues(s); values != nil {
		g.add(Candidate{at: at, op: addKey, item: values, what: "a key added"})
		g.add(Candidate{at: at, op: removeKey, what: "a key removed"})
	}
}

func itemSchema(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s.Type != "array" || s.Items == nil {
		return nil
	}
	return s.Items.Schema
}

// mapValues is the schema of a map's values, or nil if s is no map.
func mapValues(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	if s.AdditionalProperties == nil {
		return nil
	}
	return s.AdditionalProperties.Schema
}

// elements builds n distinct elements of item, at most maxElements.
func elements(item *apiextensionsv1.JSONSchemaProps, n int64, depth int) ([]any, bool) {
	if n > maxElements {
		return nil, false
	}
	out := make([]any, 0, n)
	for i := range int(n) {
		v, ok := build(item, i, depth+1)
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

// build makes the least value that s allows: its default, its first
// enum value, its lower bound, the shortest string of a's, an object of
// its required fields. variant > 0 makes a different one, where s allows
// it, so that the elements of a set or of a map list differ.
func build(s *apiextensionsv1.JSONSchemaProps, variant int, depth int) (any, bool) {
	if s == nil || depth > maxDepth {
		return nil, false
	}
	if v, ok := decode(s.Default); ok && variant == 0 {
		return v, true
	}
	if len(s.Enum) > 0 {
		return decode(&s.Enum[variant%len(s.Enum)])
	}
	switch {
	case s.XIntOrString:
		return int64(variant), true
	case s.Type == "integer":
		lo, hasLo, hi, hasHi := intBounds(s)
		if !hasLo {
			lo = min(0, hi)
		}
		if v := lo + int64(variant); !hasHi || v <= hi {
			return v, true
		}
		return lo, true
	case s.Type == "number":
		lo, hi := numBounds(s)
		if math.IsInf(lo, -1) {
			lo = min(0, hi)
		}
		if v := lo + float64(variant); v <= hi {
			return v, true
		}
		return lo, true
	case s.Type == "boolean":
		return variant%2 == 1, true
	case s.Type == "string":
		return buildString(s, variant), true
	case s.Type == "array":
		least := int64(0)
		if s.MinItems != nil {
			least = *s.MinItems
		}
		return elements(itemSchema(s), least, depth)
	case s.Type == "object":
		return buildObject(s, variant, depth)
	}
	return nil, false
}

func buildString(s *apiextensionsv1.JSONSchemaProps, variant int) string {
	if v, ok := formats[s.Format]; ok {
		return v
	}
	n := int64(1)
	if s.MinLength != nil {
		n = max(n, min(*s.MinLength, maxStringLen))
	}
	if s.MaxLength != nil {
		n = min(n, *s.MaxLength)
	}
	// variant in letters, a to z then ba, bb..., padded with a's.
	var letters []byte
	for v := variant; v > 0 || len(letters) == 0; v /= 26 {
		letters = append([]byte{byte('a' + v%26)}, letters...)
	}
	if int64(len(letters)) > n && (s.MaxLength == nil || int64(len(letters)) <= *s.MaxLength) {
		n = int64(len(letters))
	}
	if int64(len(letters)) > n {
		return strings.Repeat("a", int(n))
	}
	return strings.Repeat("a", int(n)-len(letters)) + string(letters)
}

func buildObject(s *apiextensionsv1.JSONSchemaProps, variant int, depth int) (any, bool) {
	out := map[string]any{}
	for _, name := range s.Required {
		prop, ok := s.Properties[name]
		if !ok {
			continue
		}
		v, ok := build(&prop, variant, depth+1)
		if !ok {
			return nil, false
		}
		out[name] = v
	}
	return out, true
}

// decode reads a value of the schema as unstructured objects hold it.
func decode(j *apiextensionsv1.JSON) (any, bool) {
	if j == nil || len(j.Raw) == 0 {
		return nil, false
	}
	var v any
	if err := utiljson.Unmarshal(j.Raw, &v); err != nil {
		return nil, false
	}
	return v, true
}

// show says v in a few words: a string as it is, a long one by its
// length, anything else as JSON.
func show(v any) string {
	if s, ok := v.(string); ok {
		if len(s) > 40 {
			return count(int64(len(s)), "character")
		}
		return s
	}
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	data, _ := json.Marshal(v)
	if len(data) > 60 {
		return string(data[:57]) + "..."
	}
	return string(data)
}

func count(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
