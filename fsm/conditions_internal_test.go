package fsm

import (
	"regexp"
	"strings"
	"testing"
)

// isReason says what metav1.Condition's pattern for a reason and its
// length say.
func TestIsReasonIsTheConditionsPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)
	reasons := []string{
		"", "A", "z", "Resting", "Waiting_9", "a,b", "a:b", "a,,:b", "a_", "A1",
		"1a", "_a", ",a", "a,", "a:", "a b", "a-b", "a.b", "a/b", "a\tb", "a\n",
		"é", "aé", "Éa", "a\x80", "\xc3", "ÿ", "Ａ", "a\u00a0b",
		strings.Repeat("a", maxReason), strings.Repeat("a", maxReason+1),
	}
	for c := range 256 {
		reasons = append(reasons, string(rune(c)), "a"+string(rune(c)), "a"+string(rune(c))+"b", "a"+string([]byte{byte(c)}))
	}
	for _, s := range reasons {
		want := pattern.MatchString(s) && len(s) <= maxReason
		if got := isReason(s); got != want {
			t.Errorf("isReason(%q) = %t, want %t", s, got, want)
		}
	}
}
