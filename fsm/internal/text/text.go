// Package text makes what kfsm writes to conditions and events from
// texts it does not control: one line, bounded.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// OneLine is s with each control character (C0, newlines and tabs
// included, DEL and C1) made a space: what kfsm writes to conditions and
// events is one line, with no escape sequence for a terminal that prints
// it to obey.
func OneLine(s string) string {
	if !strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c > '~' }) {
		return s // printable ASCII, the usual case, without a call of the mapping per character
	}
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, s)
}

// Clip shortens s to at most n bytes, cut at a character and marked with
// an ellipsis.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
