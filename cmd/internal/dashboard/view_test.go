package dashboard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/kfsm/kfsm/cmd/internal/browser"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
)

// The page of a 50-state machine at 1,440 × 900, the size of a laptop's
// screen.
const (
	fleetWidth  = 1440
	fleetHeight = 900
)

// fleetSection is the selector of the fleet machine's section.
const fleetSection = `section.machine[data-machine="managed-cluster"]`

// fleetGadgets places this many gadgets in the fleet's states, and
// fleetReady of them in Ready.
const (
	fleetGadgets = 36
	fleetReady   = 8
)

// openFleet publishes fleetGraph on the gadgets' CRD, alone, with gadgets
// in its states, and opens the dashboard at 1,440 × 900 once it shows
// them.
func openFleet(t *testing.T) (*browser.Page, *fsmtest.Env) {
	t.Helper()
	p := browser.Open(t)
	e := fsmtest.New(t)
	g := publishFleet(t, e)
	for i := range fleetGadgets {
		state := g.States[(i*7)%len(g.States)].Name
		if i < fleetReady {
			state = "Ready"
		}
		gadget(t, e, fmt.Sprintf("cluster-%02d", i), fsm.Status{State: fsm.State(state)})
	}
	s := serve(t, e)
	p.Do("opening the page at 1,440 × 900", chromedp.EmulateViewport(fleetWidth, fleetHeight), chromedp.Navigate(s.url))
	// Earlier tests' gadgets stay in their namespaces, and count too.
	p.Await("the fleet's gadgets on its graph", fmt.Sprintf(`Number(%s) >= %d`, fleetLive("objects", "Ready"), fleetReady), panelText, 30*time.Second)
	return p, e
}

// fleetLive is a JavaScript expression for the text of the element that
// shows a live value of the fleet machine.
func fleetLive(kind, key string) string { return liveTextOf("managed-cluster", kind, key) }

// statesOutOfSight lists the fleet's states whose box is not all inside
// both the window and the graph's area.
const statesOutOfSight = `(() => {
	const area = document.querySelector('` + fleetSection + ` .graph-wrap').getBoundingClientRect();
	const left = Math.max(0, area.left), top = Math.max(0, area.top);
	const right = Math.min(innerWidth, area.right), bottom = Math.min(innerHeight, area.bottom);
	return [...document.querySelectorAll('` + fleetSection + ` a.state')].filter(a => {
		const r = a.querySelector("rect").getBoundingClientRect();
		return r.left < left - 0.5 || r.top < top - 0.5 || r.right > right + 0.5 || r.bottom > bottom + 0.5;
	}).map(a => a.dataset.state);
})()`

// The page of a 50-state machine, in a real browser at 1,440 × 900: it
// starts with the whole graph in sight; its buttons zoom and fit it; its
// overview follows the view; the keyboard reaches it through a skip link,
// in one tab stop, and moves between its states by their positions; axe-core
// finds nothing wrong with it in light or dark mode; and the view and the
// focus outlive the page's swap of the graphs.
func TestTheFleetGraphInABrowser(t *testing.T) {
	p, e := openFleet(t)
	if out := browser.Eval[[]string](p, statesOutOfSight); len(out) > 0 {
		p.Screenshot("fleet-out-of-sight")
		t.Errorf("after load, %d of the 50 states are not all in sight: %s", len(out), strings.Join(out, ", "))
	}
	p.Screenshot("fleet")
	checkFleetTabStops(t, p)
	checkFleetKeys(t, p)
	checkFleetZoom(t, p)
	checkFleetOverview(t, p)

	p.Do("choosing Ready", chromedp.Evaluate[chromedp.Void](`location.hash = "#state/managed-cluster/Ready"`))
	p.Await("Ready's objects in the panel", fmt.Sprintf(`document.querySelectorAll('#panel a.object[href$="/%s/cluster-00"]').length === 1`, e.Namespace), panelText, 30*time.Second)
	p.Do("fitting the graph", chromedp.Click(chromedp.CSS(fleetSection+` button[data-view="fit"]`)))
	p.CheckAccessible("the fleet's page in light mode, with Ready's objects listed")
	p.PrefersColorScheme("dark")
	if got := browser.Eval[string](p, `getComputedStyle(document.body).backgroundColor`); got != "rgb(13, 17, 23)" {
		t.Errorf("in dark mode, the page's background is %s, want the dark palette's rgb(13, 17, 23)", got)
	}
	p.CheckAccessible("the fleet's page in dark mode, with Ready's objects listed")
	p.Screenshot("fleet-dark")
	p.PrefersColorScheme("")

	checkFleetSwap(t, p, e)
	p.CheckQuiet()
}

// activeState is a JavaScript expression for the state that has the
// focus, or "" when no state has it.
const activeState = `((document.activeElement && document.activeElement.closest && document.activeElement.closest("a.state")) || {dataset: {}}).dataset.state || ""`

// checkFleetTabStops checks, on a page no key has been pressed in yet,
// that the first Tab reaches the skip link and that the graph is one tab
// stop.
func checkFleetTabStops(t *testing.T, p *browser.Page) {
	t.Helper()
	var stops []string
	for range 12 {
		p.Do("pressing Tab", chromedp.KeyEvent(kb.Tab))
		stops = append(stops, browser.Eval[string](p, `(() => {
			const el = document.activeElement;
			if (!el || el === document.body) return "body";
			const svg = el.closest("svg.graph");
			if (svg) return "graph " + svg.closest("section.machine").dataset.machine;
			return el.tagName.toLowerCase() + " " + (el.getAttribute("aria-label") || el.textContent.trim());
		})()`))
	}
	if stops[0] != "a Skip to the graphs" {
		t.Errorf("the first Tab reaches %q, want the skip link to the graphs; the tab stops are %q", stops[0], stops)
	}
	graphStops := 0
	for i, s := range stops {
		if s == "graph managed-cluster" && (i == 0 || stops[i-1] != s) {
			graphStops++
		}
		if i > 0 && s == "graph managed-cluster" && stops[i-1] == s {
			t.Errorf("the graph is more than one tab stop: the tab stops are %q", stops)
			break
		}
	}
	if graphStops == 0 {
		t.Fatalf("Tab never reaches the graph: the tab stops are %q", stops)
	}

	// The skip link takes the focus to the graphs, and leaves the address
	// alone: its fragment says what the panel shows.
	p.Do("following the skip link", chromedp.Evaluate[chromedp.Void](`document.querySelector("a.skip").focus()`), chromedp.KeyEvent(kb.Enter))
	if got := browser.Eval[string](p, `document.activeElement.id + " " + location.hash`); got != "machines " {
		t.Errorf("after the skip link, the focus and the fragment are %q, want the graphs and none", got)
	}
	p.Do("pressing Tab", chromedp.KeyEvent(kb.Tab))
	if got := browser.Eval[string](p, `document.activeElement.closest("section.machine") ? "in a machine" : document.activeElement.tagName`); got != "in a machine" {
		t.Errorf("Tab after the skip link goes to %s, want the first machine's first control", got)
	}
}

// checkFleetKeys checks, from the graph's tab stop, that it has a visible
// focus ring, that arrow keys move between states by their boxes'
// positions, that + zooms around the focused state, Shift and an arrow
// pans and 0 fits, that Home and End go to the first and last states, and
// that Enter opens a state.
func checkFleetKeys(t *testing.T, p *browser.Page) {
	t.Helper()
	for browser.Eval[string](p, activeState) == "" {
		p.Do("pressing Tab", chromedp.KeyEvent(kb.Tab))
	}
	if !browser.Eval[bool](p, `document.activeElement.matches(":focus-visible") && getComputedStyle(document.activeElement).outlineStyle !== "none"`) {
		t.Error("the focused state has no visible focus ring")
	}
	centre := `(() => { const r = document.activeElement.querySelector("rect").getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`
	for _, step := range []struct {
		key       string
		axis      int
		direction float64
	}{{kb.ArrowRight, 0, 1}, {kb.ArrowDown, 1, 1}, {kb.ArrowLeft, 0, -1}, {kb.ArrowUp, 1, -1}} {
		from, before := browser.Eval[string](p, activeState), browser.Eval[[]float64](p, centre)
		p.Do("pressing an arrow", chromedp.KeyEvent(step.key))
		to, after := browser.Eval[string](p, activeState), browser.Eval[[]float64](p, centre)
		if to == "" || to == from || (after[step.axis]-before[step.axis])*step.direction <= 0 {
			t.Errorf("the key %q moves the focus from %s at %v to %q at %v, want a state in its direction", step.key, from, before, to, after)
		}
	}
	// + zooms around the focused state, Shift and an arrow pans, 0 fits.
	before, scale := browser.Eval[[]float64](p, centre), browser.Eval[float64](p, fleetScale)
	p.Do("pressing +", chromedp.KeyEvent("+"))
	if after, got := browser.Eval[[]float64](p, centre), browser.Eval[float64](p, fleetScale); got < scale*1.2 || math.Hypot(after[0]-before[0], after[1]-before[1]) > 1 {
		t.Errorf("+ takes the scale from %.3f to %.3f and the focused state from %v to %v, want a larger scale around the state", scale, got, before, after)
	}
	viewBox := `document.querySelector('` + fleetSection + ` svg.graph').getAttribute("viewBox")`
	view := browser.Eval[string](p, viewBox)
	p.Do("pressing Shift and an arrow", chromedp.KeyEvent(kb.ArrowRight, chromedp.KeyModifiers(chromedp.ModifierShift)))
	if got := browser.Eval[string](p, viewBox); got == view || browser.Eval[string](p, activeState) == "" {
		t.Errorf("Shift and the right arrow leave the view at %s, or take the focus out of the graph", got)
	}
	p.Do("pressing 0", chromedp.KeyEvent("0"))
	if out := browser.Eval[[]string](p, statesOutOfSight); len(out) > 0 {
		t.Errorf("after 0, %d states are not all in sight: %s", len(out), strings.Join(out, ", "))
	}
	g := fleetGraph()
	// End last, for Enter to open the last state.
	for _, step := range []struct {
		key  string
		want graph.State
	}{{kb.Home, g.States[0].Name}, {kb.End, g.States[len(g.States)-1].Name}} {
		p.Do("pressing Home or End", chromedp.KeyEvent(step.key))
		if got := browser.Eval[string](p, activeState); got != string(step.want) {
			t.Errorf("the key %q moves the focus to %q, want %s", step.key, got, step.want)
		}
	}
	p.Do("pressing Enter", chromedp.KeyEvent(kb.Enter))
	p.Await("Enter to open the last state", `location.hash === "#state/managed-cluster/Deleted" && document.querySelector("#panel h2") !== null && document.querySelector("#panel h2").innerText.startsWith("Deleted")`, panelText, 10*time.Second)
}

// fleetScale is a JavaScript expression for the fleet graph's scale: CSS
// pixels per unit of the drawing.
const fleetScale = `(() => { const svg = document.querySelector('` + fleetSection + ` svg.graph'); return svg.getBoundingClientRect().width / svg.viewBox.baseVal.width; })()`

// checkFleetZoom checks that the buttons zoom in, fit and show the graph
// at 100%, and that the wheel zooms around the pointer.
func checkFleetZoom(t *testing.T, p *browser.Page) {
	t.Helper()
	button := func(view string) chromedp.Action[chromedp.Void] {
		return chromedp.Click(chromedp.CSS(fleetSection + ` button[data-view="` + view + `"]`))
	}
	p.Do("fitting the graph", button("fit"))
	fitted := browser.Eval[float64](p, fleetScale)
	p.Do("zooming in three times", button("in"), button("in"), button("in"))
	if got := browser.Eval[float64](p, fleetScale); got < fitted*1.9 {
		t.Errorf("three clicks on Zoom in take the scale from %.3f to %.3f, want about twice as large", fitted, got)
	}
	if out := browser.Eval[[]string](p, statesOutOfSight); len(out) == 0 {
		t.Error("zoomed in three times, every state is still in sight")
	}
	p.Do("fitting the graph", button("fit"))
	if out := browser.Eval[[]string](p, statesOutOfSight); len(out) > 0 {
		t.Errorf("after Fit, %d states are not all in sight: %s", len(out), strings.Join(out, ", "))
	}
	if got := browser.Eval[float64](p, fleetScale); got < fitted*0.99 || got > fitted*1.01 {
		t.Errorf("after Fit, the scale is %.3f, want the first one, %.3f", got, fitted)
	}
	p.Do("showing the graph at 100%", button("actual"))
	if got := browser.Eval[float64](p, fleetScale); got < 0.99 || got > 1.01 {
		t.Errorf("after 100%%, the scale is %.3f, want 1", got)
	}

	// The drawing's point under the pointer stays under it.
	p.Do("fitting the graph", button("fit"))
	area := browser.Eval[[]float64](p, `(() => { const r = document.querySelector('`+fleetSection+` .graph-wrap').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	x, y := area[0]+area[2]*0.3, area[1]+area[3]*0.6
	under := fmt.Sprintf(`(() => { const svg = document.querySelector('`+fleetSection+` svg.graph'); const p = new DOMPoint(%g, %g).matrixTransform(svg.getScreenCTM().inverse()); return [p.x, p.y]; })()`, x, y)
	before := browser.Eval[[]float64](p, under)
	// DevTools' mouseWheel refuses a deltaX of 0, which its client leaves out.
	p.Do("turning the wheel", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.elementFromPoint(%g, %g).dispatchEvent(new WheelEvent("wheel", {clientX: %g, clientY: %g, deltaY: -200, bubbles: true, cancelable: true}))`, x, y, x, y)))
	p.Await("the wheel to zoom in", fmt.Sprintf(`%s > %g`, fleetScale, fitted*1.2), fleetScale, 5*time.Second)
	scale := browser.Eval[float64](p, fleetScale)
	if after := browser.Eval[[]float64](p, under); math.Hypot(after[0]-before[0], after[1]-before[1])*scale > 1 {
		t.Errorf("the wheel moved the drawing's point under the pointer from %v to %v, more than a pixel", before, after)
	}
	p.Do("fitting the graph", button("fit"))
}

// overviewView is a JavaScript expression for the overview's rectangle:
// x, y, width and height in the drawing's units.
const overviewView = `(() => { const r = document.querySelector('` + fleetSection + ` svg.overview .overview-view'); return ["x", "y", "width", "height"].map(a => Number(r.getAttribute(a))); })()`

// checkFleetOverview checks that the overview's rectangle follows a drag
// that pans the graph, and that a click in the overview moves the view.
func checkFleetOverview(t *testing.T, p *browser.Page) {
	t.Helper()
	if !browser.Eval[bool](p, `(() => { const o = document.querySelector('`+fleetSection+` svg.overview'); return o !== null && getComputedStyle(o).display !== "none" && o.getAttribute("aria-hidden") === "true"; })()`) {
		t.Fatal("the fleet's graph, larger than its area, has no overview, or one that assistive technology reads")
	}
	zoomIn := chromedp.Click(chromedp.CSS(fleetSection + ` button[data-view="in"]`))
	p.Do("zooming in four times", zoomIn, zoomIn, zoomIn, zoomIn)
	hash := browser.Eval[string](p, `location.hash`)
	before := browser.Eval[[]float64](p, overviewView)
	scale := browser.Eval[float64](p, fleetScale)
	area := browser.Eval[[]float64](p, `(() => { const r = document.querySelector('`+fleetSection+` .graph-wrap').getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`)
	p.Do("dragging the graph left and up", chromedp.DragAndDropXY(area[0], area[1], area[0]-100, area[1]-100, 10))
	// The view moves 100px right and down, less where the drawing ends.
	after := browser.Eval[[]float64](p, overviewView)
	dx, dy := (after[0]-before[0])*scale, (after[1]-before[1])*scale
	if dx < -0.5 || dx > 100.5 || dy < -0.5 || dy > 100.5 || max(dx, dy) < 99.5 {
		t.Errorf("a drag of 100px left and up moves the overview's rectangle from %v to %v, by %.1fpx and %.1fpx at the graph's scale, want 100px right or down", before, after, dx, dy)
	}
	if viewBox := browser.Eval[[]float64](p, `(() => { const b = document.querySelector('`+fleetSection+` svg.graph').viewBox.baseVal; return [b.x, b.y, b.width, b.height]; })()`); math.Abs(viewBox[0]-after[0]) > 0.01 || math.Abs(viewBox[1]-after[1]) > 0.01 {
		t.Errorf("the overview shows the view at %v, but the graph's viewBox is %v", after, viewBox)
	}
	if got := browser.Eval[string](p, `location.hash`); got != hash {
		t.Errorf("a drag that pans the graph opened %s", got)
	}
	// A click at the overview's left end brings the view there.
	mini := browser.Eval[[]float64](p, `(() => { const r = document.querySelector('`+fleetSection+` svg.overview').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	p.Do("clicking the overview's left end", chromedp.MouseClickXY(mini[0]+2, mini[1]+mini[3]/2))
	if clicked := browser.Eval[[]float64](p, overviewView); clicked[0] >= after[0] {
		t.Errorf("a click at the overview's left end moves its rectangle from %v to %v, want it to the left", after, clicked)
	}
}

// sameView tells whether two viewBox attributes show the same view: the
// graph's area may be a pixel taller or shorter when it is laid out again,
// so they may differ by 0.5%.
func sameView(a, b string) bool {
	parse := func(s string) []float64 {
		var out []float64
		for _, f := range strings.Fields(s) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				return nil
			}
			out = append(out, v)
		}
		return out
	}
	va, vb := parse(a), parse(b)
	if len(va) != 4 || len(vb) != 4 {
		return false
	}
	tolerance := 0.005 * max(va[2], va[3])
	for i := range va {
		if math.Abs(va[i]-vb[i]) > tolerance {
			return false
		}
	}
	return true
}

// checkFleetSwap checks that when the page swaps its graphs, as it does
// when a machine appears, the fleet's graph keeps its view and its
// focused state keeps the focus.
func checkFleetSwap(t *testing.T, p *browser.Page, e *fsmtest.Env) {
	t.Helper()
	zoomIn := chromedp.Click(chromedp.CSS(fleetSection + ` button[data-view="in"]`))
	p.Do("zooming in twice and choosing a state by keyboard", zoomIn, zoomIn,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('`+fleetSection+` a.state[tabindex="0"]').focus()`),
		chromedp.KeyEvent(kb.ArrowRight))
	viewBox := `document.querySelector('` + fleetSection + ` svg.graph').getAttribute("viewBox")`
	view, state := browser.Eval[string](p, viewBox), browser.Eval[string](p, activeState)
	p.Do("marking the graph", chromedp.Evaluate[chromedp.Void](`document.querySelector('`+fleetSection+` svg.graph').dataset.before = "swap"`))
	publishGadgets(t, e)
	p.Await("the page to draw a second machine", `document.querySelector('section.machine[data-machine="gadget-actions"]') !== null`, panelText, 30*time.Second)
	if browser.Eval[bool](p, `document.querySelector('`+fleetSection+` svg.graph').dataset.before === "swap"`) {
		t.Fatal("the page drew a second machine without swapping the graphs")
	}
	if got := browser.Eval[string](p, viewBox); !sameView(got, view) {
		t.Errorf("after the swap, the fleet's view is %q, want %q as before", got, view)
	}
	if got := browser.Eval[string](p, activeState); got != state {
		t.Errorf("after the swap, the focus is on state %q, want %q as before", got, state)
	}
	if got := browser.Eval[[]string](p, `[...document.querySelectorAll('`+fleetSection+` a.state[tabindex="0"]')].map(a => a.dataset.state)`); len(got) != 1 || got[0] != state {
		t.Errorf("after the swap, the graph's tab stops are %q, want %s alone", got, state)
	}
}

// The fleet's graph, fitted to its area at 1,440 × 900, draws every
// state's name at 9px or larger.
func TestTheFleetGraphIsReadableWhenFitted(t *testing.T) {
	p, _ := openFleet(t)
	type size struct {
		State string  `json:"state"`
		Px    float64 `json:"px"`
	}
	sizes := browser.Eval[[]size](p, `[...document.querySelectorAll('`+fleetSection+` a.state')].map(a => {
		const t = a.querySelector("text.name"), m = t.getScreenCTM();
		return {state: a.dataset.state, px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b)};
	})`)
	if len(sizes) != 50 {
		t.Fatalf("the page draws %d states of the fleet, want 50", len(sizes))
	}
	small := 0
	smallest := sizes[0]
	for _, s := range sizes {
		if s.Px < 9 {
			small++
		}
		if s.Px < smallest.Px {
			smallest = s
		}
	}
	if small > 0 {
		p.Screenshot("fleet-small")
		t.Errorf("fitted at scale %.3f, %d of the 50 states' names are drawn smaller than 9px, the smallest, %s's, at %.1fpx",
			browser.Eval[float64](p, fleetScale), small, smallest.State, smallest.Px)
	}
}

// drawingFaults lists what overlaps in the fleet's drawing as the browser
// renders it, in the drawing's units: two state boxes; an edge's text box
// and another's, or a state's box; an edge's path and the box of a state
// other than its ends (those that its first and last points touch),
// sampled every 2 units.
const drawingFaults = `(() => {
	const svg = document.querySelector('` + fleetSection + ` svg.graph');
	const toDrawing = svg.getScreenCTM().inverse();
	const matrix = el => toDrawing.multiply(el.getScreenCTM());
	const box = el => {
		const b = el.getBBox(), m = matrix(el);
		const corners = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
			.map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
		const xs = corners.map(p => p.x), ys = corners.map(p => p.y);
		return {x0: Math.min(...xs), y0: Math.min(...ys), x1: Math.max(...xs), y1: Math.max(...ys)};
	};
	const overlap = (a, b) => Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0) > 0.5 && Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0) > 0.5;
	const inside = (p, b, margin) => p.x > b.x0 + margin && p.x < b.x1 - margin && p.y > b.y0 + margin && p.y < b.y1 - margin;
	const edgeName = el => { const g = el.closest("g.edge, g.entry"); const t = g && g.querySelector("title"); return t ? t.textContent.split(":")[0] : "an edge"; };
	const states = [...svg.querySelectorAll("a.state")].map(a => ({name: a.dataset.state, ...box(a.querySelector("rect"))}));
	const texts = [...svg.querySelectorAll(".edge-text")].filter(t => t.textContent.trim() !== "")
		.map(t => ({name: '"' + t.textContent.trim() + '" of ' + edgeName(t), ...box(t)}));
	const faults = [];
	states.forEach((a, i) => states.slice(i + 1).forEach(b => overlap(a, b) && faults.push("the boxes of " + a.name + " and " + b.name + " overlap")));
	texts.forEach((a, i) => {
		texts.slice(i + 1).forEach(b => overlap(a, b) && faults.push("the text " + a.name + " overlaps the text " + b.name));
		states.forEach(s => overlap(a, s) && faults.push("the text " + a.name + " overlaps the box of " + s.name));
	});
	for (const path of svg.querySelectorAll("g.edge path, g.entry path")) {
		const m = matrix(path), length = path.getTotalLength(), points = [];
		for (let l = 0; l < length + 2; l += 2) points.push(DOMPoint.fromPoint(path.getPointAtLength(Math.min(l, length))).matrixTransform(m));
		const first = points[0], last = points[points.length - 1];
		for (const s of states) {
			if (inside(first, s, -6) || inside(last, s, -6)) continue;
			if (points.some(p => inside(p, s, 1))) faults.push("the path of " + edgeName(path) + " crosses the box of " + s.name);
		}
	}
	return faults;
})()`

// The fleet's drawing, as a real browser renders it, has no overlaps: no
// two state boxes overlap, no edge's text overlaps another's or a state's
// box, and no edge passes through a state other than its ends.
func TestTheFleetGraphRendersWithoutOverlaps(t *testing.T) {
	p, _ := openFleet(t)
	faults := browser.Eval[[]string](p, drawingFaults)
	if len(faults) > 0 {
		p.Screenshot("fleet-overlaps")
		t.Errorf("the fleet's drawing has %d overlaps:\n\t%s", len(faults), strings.Join(faults, "\n\t"))
	}
}
