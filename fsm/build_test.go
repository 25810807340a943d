package fsm_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// Options out of range are refused with the graph's problems, never left
// to panic in kfsm's own code later.
func TestBuildRefusesBadOptions(t *testing.T) {
	m := fsm.New[*gadget]("bad-options", fsm.Lifecycle).
		Tune(fsm.Tuning{HistoryLimit: -1, ActionLimit: -1, Workers: -1, Resync: -time.Second}).
		Initial("Start").
		State("Start", done, fsm.Final())
	err := m.Build()
	var verr *graph.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Build() = %v, want a *graph.ValidationError", err)
	}
	var found []string
	for _, p := range verr.Problems {
		if p.Code == fsm.BadOption {
			found = append(found, p.Detail)
		}
	}
	for _, option := range []string{"Tuning.HistoryLimit -1", "Tuning.ActionLimit -1", "Tuning.Workers -1", "Tuning.Resync -1s"} {
		if !slices.ContainsFunc(found, func(d string) bool { return strings.HasPrefix(d, option) }) {
			t.Errorf("Build() does not refuse %s; problems: %v", option, found)
		}
	}
	ok := fsm.New[*gadget]("zero-options", fsm.Lifecycle).Tune(fsm.Tuning{HistoryLimit: 1, SlowHandlerAfter: -time.Second}).Tune(fsm.Tuning{}).
		Initial("Start").State("Start", done, fsm.Final())
	if err := ok.Build(); err != nil {
		t.Errorf("HistoryLimit 1, a negative SlowHandlerAfter (no log) and a zero Tuning are valid; Build() = %v", err)
	}
}

func TestBuildListsEveryProblem(t *testing.T) {
	m := fsm.New[*gadget]("broken", fsm.Pipeline).
		Initial("Start").
		State("Start", nil, fsm.To("Loop", "Nowhere")).
		State("Loop", next("Start"), fsm.To("Start")).
		State("Island", done, fsm.Final()).
		State("Ready", done, fsm.Final())
	err := m.Build()
	var verr *graph.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Build() = %v, want a *graph.ValidationError", err)
	}
	for _, code := range []graph.ProblemCode{fsm.NoHandler, fsm.BadConditionType, graph.UnknownTarget, graph.Unreachable, graph.Cycle} {
		if !verr.Has(code) {
			t.Errorf("Build() does not report %s:\n%v", code, err)
		}
	}
}
