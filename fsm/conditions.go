package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/internal/refusal"
	"github.com/kfsm/kfsm/internal/typo"
)

// settle sets the top-level conditions, and a pipeline's state conditions,
// for a walk that ended in state cur. A condition that changes takes the
// walk's time, read from the machine's clock.
func (w *walker[T]) settle(cur State, ready metav1.ConditionStatus, reason, message string, reconciling bool, stalled *metav1.Condition) {
	gen, now := w.obj.GetGeneration(), metav1.NewTime(w.now)
	set := func(t string, s metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&w.st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: gen, LastTransitionTime: now})
	}
	set(ConditionReady, ready, reason, message)
	if reconciling {
		set(ConditionReconciling, metav1.ConditionTrue, reason, message)
	} else {
		removeCondition(&w.st.Conditions, ConditionReconciling)
	}
	if stalled != nil {
		set(ConditionStalled, metav1.ConditionTrue, stalled.Reason, stalled.Message)
	} else {
		removeCondition(&w.st.Conditions, ConditionStalled)
	}
	if w.r.m.mode != Pipeline {
		return
	}
	for _, s := range w.r.m.states {
		switch {
		case w.passed.has(s.index):
			set(string(s.name), metav1.ConditionTrue, ReasonPassed, "")
		case s.name == cur:
			set(string(s.name), ready, reason, message)
		default:
			// Not reached in this pass: a condition left from an earlier
			// pass would tell something no longer true.
			removeCondition(&w.st.Conditions, string(s.name))
		}
	}
}

// stall marks the object Stalled. The first time, not again while it
// stays so (the condition holds the message as clipped), it records an
// event and logs, after logError when there is one.
func (w *walker[T]) stall(cur State, reason, message string, logError func()) {
	message = truncate(message)
	if message == "" {
		message = fmt.Sprintf("stopped in state %s", cur)
	}
	if c := meta.FindStatusCondition(w.st.Conditions, ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || c.Message != message {
		if logError != nil {
			w.later(logError)
		}
		w.later(func() {
			w.log.Info("stalled", "machine", w.r.m.name, "state", cur, "reason", reason, "message", message)
		})
		w.notify(corev1.EventTypeWarning, reason, string(cur), fmt.Sprintf("stalled in state %s: %s", cur, message), nil)
	}
	w.st.RetryAt = nil
	w.settle(cur, metav1.ConditionFalse, reason, message, false, &metav1.Condition{Reason: reason, Message: message})
}

// illegal refuses an undeclared transition: the state stays, and the
// object is reported so that the bug is seen.
func (w *walker[T]) illegal(cur State, res Result) {
	def := w.r.b.states[cur]
	events := append([]State{res.next}, res.also...)
	bad := events[slices.IndexFunc(events, func(e State) bool { return def.exitIndex(e) < 0 })]
	_, declared := w.r.b.states[bad]
	undeclared := !declared && bad != Default
	msg := refusal.Why(refusal.Past, cur, events, bad, def.exits, undeclared, typo.Closest(bad, w.r.m.stateNames())) + "; the transition was refused"
	w.rest(cur, ReasonIllegalTransition)
	w.stall(cur, ReasonIllegalTransition, msg, func() {
		w.log.Error(errors.New(msg), "illegal transition", "machine", w.r.m.name, "from", cur, "to", res.next)
	})
}

// unreachableGoal reports a goal that the object cannot walk to. No
// handler runs: it would be told to walk where no path leads.
func (w *walker[T]) unreachableGoal(cur State, err error) {
	w.stall(cur, ReasonGoalUnreachable, err.Error(), func() {
		w.log.Error(err, "unreachable goal", "machine", w.r.m.name, "state", cur, "goal", w.goal)
	})
}

// unknownState reports a persisted state the graph does not have, for
// example after a state was renamed. The state is kept: resetting it
// would throw away where the object really is.
func (w *walker[T]) unknownState() {
	msg := fmt.Sprintf("the object is in state %q, which machine %s does not declare (states: %s); it was left there", w.st.State, w.r.m.name, refusal.Join(w.r.m.stateNames()))
	w.stall(w.st.State, ReasonUnknownState, msg, func() {
		w.log.Error(errors.New(msg), "unknown state", "machine", w.r.m.name, "state", w.st.State)
	})
}

// removeCondition is meta.RemoveStatusCondition without its allocation
// when there is nothing to remove, the usual case.
func removeCondition(conditions *[]metav1.Condition, t string) (removed bool) {
	return meta.FindStatusCondition(*conditions, t) != nil && meta.RemoveStatusCondition(conditions, t)
}

// isReason reports whether the API server accepts s as a condition reason:
// ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ in maxReason bytes (a regexp took a tenth of a step).
func isReason(s string) bool {
	ok := s != "" && len(s) <= maxReason && asciiLetter(s[0]) && reasonWord(s[len(s)-1])
	for i := 1; ok && i < len(s)-1; i++ {
		ok = reasonWord(s[i]) || s[i] == ',' || s[i] == ':'
	}
	return ok
}

func asciiLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func reasonWord(c byte) bool { return asciiLetter(c) || '0' <= c && c <= '9' || c == '_' }

// reasonOr returns reason if the API server accepts it as a condition
// reason, else a CamelCase version of it, else fallback.
func reasonOr(reason, fallback string) string {
	if isReason(reason) {
		return reason
	}
	var b strings.Builder
	for _, word := range strings.FieldsFunc(reason, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	if s := b.String(); isReason(s) {
		return s
	}
	return fallback
}
