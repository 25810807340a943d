package terminal

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLineAndText(t *testing.T) {
	cases := map[string]struct {
		in, line, text string
	}{
		"Plain":         {in: "moved from Eating to Roaming → Sleeping", line: "moved from Eating to Roaming → Sleeping", text: "moved from Eating to Roaming → Sleeping"},
		"WindowTitle":   {in: "\x1b]0;pwned\x07", line: `\x1b]0;pwned\a`, text: `\x1b]0;pwned\a`},
		"ClearScreen":   {in: "a\x1b[2Jb", line: `a\x1b[2Jb`, text: `a\x1b[2Jb`},
		"Clipboard":     {in: "\x1b]52;c;ZXZpbA==\x07", line: `\x1b]52;c;ZXZpbA==\a`, text: `\x1b]52;c;ZXZpbA==\a`},
		"ForgedLine":    {in: "ok\r\nForged: line", line: `ok\r\nForged: line`, text: "ok\\r\nForged: line"},
		"Tab":           {in: "a\tb", line: `a\tb`, text: "a\tb"},
		"C1":            {in: "\u009b31m\u0085", line: `\u009b31m\u0085`, text: `\u009b31m\u0085`},
		"RawC1Byte":     {in: "\x9b31m", line: `\x9b31m`, text: `\x9b31m`},
		"DeleteAndNUL":  {in: "\x7f\x00\b", line: `\x7f\x00\b`, text: `\x7f\x00\b`},
		"Replacement":   {in: "\uFFFD", line: "\uFFFD", text: "\uFFFD"},
		"Backslash":     {in: `C:\x1b`, line: `C:\x1b`, text: `C:\x1b`},
		"Empty":         {},
		"OnlyAtTheEnd":  {in: "end\x1b", line: `end\x1b`, text: `end\x1b`},
		"OnlyAtTheHead": {in: "\x1bhead", line: `\x1bhead`, text: `\x1bhead`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(c.line, Line(c.in)); diff != "" {
				t.Errorf("Line(%q) (-want +got):\n%s", c.in, diff)
			}
			if diff := cmp.Diff(c.text, Text(c.in)); diff != "" {
				t.Errorf("Text(%q) (-want +got):\n%s", c.in, diff)
			}
		})
	}
}

// JSON keeps the JSON it is given, the same values, and prints no control
// character but its own newlines.
func TestJSON(t *testing.T) {
	values := map[string]string{"message": "\x1b]0;pwned\x07 \u009b31m \x7f\r\nForged: line", "name": "Roaming"}
	data, err := json.MarshalIndent(values, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(data)
	want := "{\n  \"message\": \"\\u001b]0;pwned\\u0007 \\u009b31m \\u007f\\r\\nForged: line\",\n  \"name\": \"Roaming\"\n}"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(values, back); diff != "" {
		t.Errorf("JSON changed the values (-want +got):\n%s", diff)
	}
}
