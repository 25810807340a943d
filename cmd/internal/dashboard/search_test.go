package dashboard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
)

func TestSearchMatchesNamesStatesNamespacesAndConditions(t *testing.T) {
	object := func(ns, name string, state fsm.State, conditions ...metav1.Condition) inspect.Object {
		o := inspect.Object{Namespace: ns, Name: name}
		o.Status.State, o.Status.Conditions = state, conditions
		return o
	}
	stalled := metav1.Condition{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue}
	notReady := metav1.Condition{Type: fsm.ConditionReady, Status: metav1.ConditionFalse}
	objects := []inspect.Object{
		object("team-a", "c-00001", "Ready"),
		object("team-a", "c-00002", "Repairing", stalled, notReady),
		object("team-b", "c-00012", "Ready", notReady),
		object("team-b", "web", "Deleting"),
	}
	cases := map[string][]string{
		"":                             {"c-00001", "c-00002", "c-00012", "web"},
		"c-0000":                       {"c-00001", "c-00002"},
		"C-00012":                      {"c-00012"},
		"team-b/":                      {"c-00012", "web"},
		"state:ready":                  {"c-00001", "c-00012"},
		"state:Ready state:Deleting":   {"c-00001", "c-00012", "web"},
		"ns:team-a state:Ready":        {"c-00001"},
		"namespace:team-b c-":          {"c-00012"},
		"cond:Stalled":                 {"c-00002"},
		"cond:Ready=False":             {"c-00002", "c-00012"},
		"cond:Ready=False ns:team-b":   {"c-00012"},
		"cond:Ready":                   nil,
		"state:Ready cond:Stalled web": nil,
	}
	for q, want := range cases {
		parsed, err := parseQuery(q)
		if err != nil {
			t.Errorf("parseQuery(%q): %v", q, err)
			continue
		}
		var got []string
		for _, o := range objects {
			if parsed.matches(o) {
				got = append(got, o.Name)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("search %q found %v, want %v", q, got, want)
		}
	}
}

func TestSearchNamesTheTermItCannotRead(t *testing.T) {
	for q, want := range map[string]string{
		"colour:red":   `"colour:" is no filter`,
		"state:":       `"state:" names no value`,
		"web ns: cond": `"ns:" names no value`,
	} {
		if _, err := parseQuery(q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseQuery(%q) = %v, want an error saying %s", q, err, want)
		}
	}
}
