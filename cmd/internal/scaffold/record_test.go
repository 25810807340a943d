package scaffold

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRecordReadsWhatItWrites(t *testing.T) {
	want := record{Name: "widget-operator", Module: "example.com/widget", Group: "example.com", Kinds: []recordKind{
		{Kind: "Widget", Version: "v1alpha1"}, {Kind: "Gadget", Version: "v1"},
	}}
	got, err := parseRecord(want.marshal())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-written +read):\n%s", diff)
	}
}

func TestRecordReadsItsYAMLWithKeysInAnyOrderQuotedAndCommented(t *testing.T) {
	src := `# mine
group: "example.com"
kinds:
  # the first
  - version: v1alpha1
    kind: Widget
module: example.com/widget
name: widget-operator
layout: kfsm.dev/v1alpha1
`
	got, err := parseRecord([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := record{Name: "widget-operator", Module: "example.com/widget", Group: "example.com", Kinds: []recordKind{{Kind: "Widget", Version: "v1alpha1"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestRecordRefusesWhatItDoesNotRead(t *testing.T) {
	valid := record{Name: "widget-operator", Module: "example.com/widget", Group: "example.com", Kinds: []recordKind{{Kind: "Widget", Version: "v1alpha1"}}}.marshal()
	for name, tc := range map[string]struct {
		src  string
		want string
	}{
		"UnknownKey":    {string(valid) + "domain: example.com\n", "unknown key domain"},
		"OtherLayout":   {strings.Replace(string(valid), "kfsm.dev/v1alpha1", "go.kubebuilder.io/v4", 1), "writes the layout kfsm.dev/v1alpha1 only"},
		"Missing":       {"layout: kfsm.dev/v1alpha1\nkinds:\n", "lacks name, module, group"},
		"Twice":         {string(valid) + "name: other\n", "a second name"},
		"KindField":     {string(valid) + "    plural: widgets\n", "a kind has a kind and a version only"},
		"NotAKeyValue":  {string(valid) + "  - Widget\n", "not a key and a value"},
		"KindNoVersion": {string(valid) + "  - kind: Gadget\n", "a kind without a kind or a version"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseRecord([]byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseRecord: %v, want an error that says %q", err, tc.want)
			}
		})
	}
}
