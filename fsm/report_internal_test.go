package fsm

import (
	"testing"
	"unicode/utf8"
)

func TestOneLineLeavesNoControlCharacter(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                  "plain",
		"two\nlines\ttab":        "two lines tab",
		"esc \x1b[31mred\x1b[0m": "esc  [31mred [0m",
		"c1 \u009b2J del \x7f":   "c1  2J del  ",
		"héllo, 世界":              "héllo, 世界",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClipCutsAtACharacter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer text", 8, "a lon…"},
		{"世界世界", 8, "世…"}, // 3 bytes each: "世界" and the ellipsis would be 9
	} {
		got := clip(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("clip(%q, %d) = %q, want %q, valid UTF-8 of at most %d bytes", tc.in, tc.n, got, tc.want, tc.n)
		}
	}
}
