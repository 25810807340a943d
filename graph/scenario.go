package graph

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Scenario writes the skeleton of an fsmtest test for each finding, in
// one Go file for the package of the machine's tests: each test drives an
// object along its finding's walk, one step at a time, and ends with what
// should happen once the problem is fixed, so that it fails until then.
// What kfsm does by itself, a timeout or the deletion entry, is written
// out; what only a handler or a change of the object can do (an exit, the
// failures that exhaust retries, a goal) is a TODO for the author, as are
// the machine to run and the object to create. The file is valid Go, and
// compiles once the TODOs are done. A finding without a walk, a goal that
// the graph does not declare, gets no test; with no test to write,
// Scenario returns "".
func (g *Graph) Scenario(findings ...Finding) string {
	var body strings.Builder
	timed := false
	names := map[string]int{}
	for _, f := range findings {
		if len(f.Path) == 0 {
			continue
		}
		name := testName(g.Name, f)
		if names[name]++; names[name] > 1 {
			name += strconv.Itoa(names[name])
		}
		body.WriteString("\n")
		timed = g.scenario(&body, name, f) || timed
	}
	if body.Len() == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s_test\n\n", packageName(g.Name))
	b.WriteString("import (\n\t\"testing\"\n")
	if timed {
		b.WriteString("\t\"time\"\n")
	}
	b.WriteString("\n\t\"github.com/kfsm/kfsm/fsm\"\n\t\"github.com/kfsm/kfsm/fsmtest\"\n)\n")
	b.WriteString(body.String())
	return b.String()
}

// scenario writes the test of one finding and reports whether it moves
// the clock.
func (g *Graph) scenario(b *strings.Builder, name string, f Finding) bool {
	doc := fmt.Sprintf("%s walks the counterexample of the %s that the model check found in the graph of machine %s:",
		name, f.Code, comment(g.Name))
	for _, line := range wrap(doc, 72) {
		fmt.Fprintf(b, "// %s\n", line)
	}
	b.WriteString("//\n")
	for _, line := range wrap(comment(f.Detail), 68) {
		fmt.Fprintf(b, "//\t%s\n", line)
	}
	fmt.Fprintf(b, "//\n//\t%s\n", comment(f.Walk()))
	fmt.Fprintf(b, "func %s(t *testing.T) {\n", name)
	b.WriteString("\te := fsmtest.New(t)\n")
	b.WriteString("\t// TODO: run the machine on the test's clock, as the package's other\n")
	b.WriteString("\t// tests do: fsmtest.Run(e, machine.WithClock(e.Clock)).\n")
	b.WriteString("\t// TODO: the object that walks the counterexample, such as\n")
	b.WriteString("\t// &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: \"walker\"}}.\n")
	b.WriteString("\tvar obj fsm.Object\n")
	b.WriteString("\te.Create(obj)\n")
	fmt.Fprintf(b, "\te.AwaitState(obj, %s)\n", strconv.Quote(string(g.Initial())))
	step := 1
	if f.Deleting {
		b.WriteString("\t// TODO: deletion starts from whatever state the object is in: move it\n")
		b.WriteString("\t// first to one where the problem shows, if it matters.\n")
		fmt.Fprintf(b, "\n\t// %d. On delete -> %s: the deletion path starts.\n", step, comment(string(f.Path[0])))
		b.WriteString("\te.Delete(obj)\n")
		fmt.Fprintf(b, "\te.AwaitState(obj, %s)\n", strconv.Quote(string(f.Path[0])))
		step++
	}
	timed := false
	for i, e := range f.Steps {
		if len(f.Loop) > 0 && i == len(f.Steps)-len(f.Loop) {
			b.WriteString("\n\t// From here the walk goes round the loop, and can again and again.\n")
		}
		timed = writeStep(b, step, e) || timed
		step++
	}
	writeEnd(b, f)
	b.WriteString("}\n")
	return timed
}

// writeStep writes one step of the walk and reports whether it moves the
// clock.
func writeStep(b *strings.Builder, n int, e Edge) bool {
	from, to := comment(string(e.From)), comment(string(e.To))
	var say, todo string
	switch e.Kind {
	case TimeoutExit:
		say = fmt.Sprintf("%d. %s -> %s, %s's timeout of %s: kfsm moves the object on, whatever its handler returns meanwhile.",
			n, from, to, from, shortDuration(e.After))
	case RetriesExit:
		say = fmt.Sprintf("%d. %s -> %s, after %d failures in %s.", n, from, to, e.Limit, from)
		todo = fmt.Sprintf("TODO: make %s's handler fail (fsm.Fail) %d times; each retry comes after its backoff, which e.Clock.Step passes.", from, e.Limit)
	default:
		say = fmt.Sprintf("%d. %s -> %s, an exit: %s's handler returns fsm.Next(%s).", n, from, to, from, strconv.Quote(string(e.To)))
		todo = "TODO: change obj with e.Update, or what the handler reads, so that it does."
	}
	b.WriteString("\n")
	for _, line := range append(wrap(say, 72), wrap(todo, 72)...) {
		fmt.Fprintf(b, "\t// %s\n", line)
	}
	if e.Kind == TimeoutExit {
		fmt.Fprintf(b, "\te.Clock.Step(%s)\n", durationCode(e.After))
	}
	fmt.Fprintf(b, "\te.AwaitState(obj, %s)\n", strconv.Quote(string(e.To)))
	return e.Kind == TimeoutExit
}

// writeEnd writes what should happen at the end of the walk once the
// problem is fixed: while it is there, the test fails here.
func writeEnd(b *strings.Builder, f Finding) {
	b.WriteString("\n")
	switch {
	case f.Code == GoalUnreachable:
		fmt.Fprintf(b, "\t// TODO: give obj the goal %s, as the machine's Goal reads it, with\n", comment(string(f.Goal)))
		b.WriteString("\t// e.Update. It cannot be reached from here: until it can, the object\n")
		b.WriteString("\t// stalls with reason GoalUnreachable, and the test fails here.\n")
		fmt.Fprintf(b, "\te.AwaitState(obj, %s)\n", strconv.Quote(string(f.Goal)))
	case f.Deleting:
		b.WriteString("\t// The finalizer goes once a final state is reached: until the deletion\n")
		b.WriteString("\t// path can end from here, the test fails here.\n")
		b.WriteString("\te.AwaitGone(obj)\n")
	case f.Code == Trap:
		b.WriteString("\t// The object should come to rest: until it can, the test fails here.\n")
		b.WriteString("\te.AwaitReady(obj)\n")
	default:
		b.WriteString("\t// TODO: assert what should end the cycle, once something does.\n")
	}
}

// durationCode writes d as Go code, in the largest unit that divides it.
func durationCode(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"}, {time.Millisecond, "Millisecond"}} {
		if d != 0 && d%u.unit == 0 {
			return fmt.Sprintf("%d * time.%s", d/u.unit, u.name)
		}
	}
	return fmt.Sprintf("time.Duration(%d)", int64(d))
}

// testName names the test of a finding after the machine, the problem and
// its first state.
func testName(machine string, f Finding) string {
	var first string
	if len(f.States) > 0 {
		first = string(f.States[0])
	}
	if f.Code == GoalUnreachable {
		first = string(f.Goal)
	}
	return "Test" + identifier(machine) + identifier(string(f.Code)) + identifier(first)
}

// identifier keeps the letters and digits of s, each word capitalized.
func identifier(s string) string {
	var b strings.Builder
	upper := true
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
		upper = false
	}
	return b.String()
}

// packageName is the machine's name as a package name: its letters and
// digits in lower case, starting with a letter.
func packageName(machine string) string {
	name := strings.ToLower(identifier(machine))
	if name == "" || !unicode.IsLetter([]rune(name)[0]) {
		name = "machine" + name
	}
	return name
}

// comment makes s safe in a line comment: a name that holds a line break
// or another character that is not printable is written quoted.
func comment(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// wrap breaks text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
