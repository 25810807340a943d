package kubectlfsm

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
)

// The transitions a watch prints are those a history gained since the
// copy it knew, told apart by the whole transition and its place, not by
// a time of seconds: a full history drops its oldest entries as it gains.
func TestAppendedAreTheTransitionsAHistoryGained(t *testing.T) {
	sec := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	move := func(from, to fsm.State) fsm.Transition {
		return fsm.Transition{From: from, To: to, Reason: "Next", Time: sec}
	}
	ab, ba, bc, ca := move("A", "B"), move("B", "A"), move("B", "C"), move("C", "A")
	ca.Time = metav1.NewTime(sec.Add(time.Second))
	for name, c := range map[string]struct {
		known, history, want []fsm.Transition
	}{
		"unchanged":                     {[]fsm.Transition{ab}, []fsm.Transition{ab}, nil},
		"one more in the same second":   {[]fsm.Transition{ab}, []fsm.Transition{ab, bc}, []fsm.Transition{bc}},
		"back and forth in one second":  {[]fsm.Transition{ab}, []fsm.Transition{ab, ba, ab}, []fsm.Transition{ba, ab}},
		"full: the oldest dropped":      {[]fsm.Transition{ab, ba, ab}, []fsm.Transition{ba, ab, bc}, []fsm.Transition{bc}},
		"full: two dropped, two gained": {[]fsm.Transition{ab, ba, ab}, []fsm.Transition{ab, bc, ca}, []fsm.Transition{bc, ca}},
		"nothing known":                 {nil, []fsm.Transition{ab, bc}, []fsm.Transition{ab, bc}},
		"nothing known survives":        {[]fsm.Transition{ba}, []fsm.Transition{ab, bc}, []fsm.Transition{ab, bc}},
	} {
		if got := appended(c.known, c.history); !cmp.Equal(got, c.want, cmpopts.EquateEmpty()) {
			t.Errorf("%s: appended = %v, want %v", name, got, c.want)
		}
	}
}
