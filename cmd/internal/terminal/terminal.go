// Package terminal makes text that the commands did not write themselves,
// such as what a cluster's objects and events say, safe to print on a
// terminal. A terminal obeys the control characters it is sent: escape
// sequences set its title, clear the screen or write the clipboard (OSC
// 52), a carriage return or a newline forges a line. Each control
// character (C0, DEL and C1) is printed as a visible escape instead, as Go
// writes it (\x1b, \r, \u009b), and the rest of the text stays readable.
//
// kubectl does the same with less: its printers.EscapeTerminal escapes
// ESC and CR only, and lets through BEL, the C1 CSI and newlines.
package terminal

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line is s with every control character escaped, newlines and tabs
// included, so that it prints as one line whatever it holds: a name, a
// reason or a message in a table or a sentence.
func Line(s string) string { return escape(s, "", goEscape) }

// Text is s with every control character escaped but newlines and tabs:
// a text of several lines that a command drew itself, around names that
// cannot break its lines (DOT and Mermaid quote theirs), or an error.
func Text(s string) string { return escape(s, "\n\t", goEscape) }

// JSON is data, JSON as encoding/json writes it, with DEL and the C1
// controls written as \u escapes: the same JSON, safe to print.
// encoding/json escapes the C0 controls in strings, but not those.
func JSON(data []byte) []byte { return []byte(escape(string(data), "\n\t", jsonEscape)) }

// escape writes each control character of s but those in keep, and each
// byte that is not UTF-8, as esc writes it.
func escape(s, keep string, esc func(char string) string) string {
	var b strings.Builder
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || (unicode.IsControl(r) && !strings.ContainsRune(keep, r)) {
			b.WriteString(s[done:i])
			b.WriteString(esc(s[i : i+n]))
			done = i + n
		}
		i += n
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// goEscape writes a character as in a Go string literal.
func goEscape(char string) string {
	q := strconv.Quote(char)
	return q[1 : len(q)-1]
}

// jsonEscape writes a character as in a JSON string; a byte that is not
// UTF-8 is the replacement character, as encoding/json has it.
func jsonEscape(char string) string {
	r, _ := utf8.DecodeRuneInString(char)
	return fmt.Sprintf(`\u%04x`, r)
}
