package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cmd/internal/browser"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// liveText is a JavaScript expression for the text of the element that
// shows a live value of the door machine.
func liveText(kind, key string) string { return liveTextOf("door", kind, key) }

// liveTextOf is a JavaScript expression for the text of the element that
// shows a live value of a machine.
func liveTextOf(machine, kind, key string) string {
	k, _ := json.Marshal(liveKey(kind, machine, key))
	return fmt.Sprintf(`([...document.querySelectorAll("[data-live]")].find(e => e.dataset.live === %s) || {}).textContent`, k)
}

const panelText = `document.getElementById("panel").innerText`

// unpublish removes the door machine's graph from the doors' CRD, as
// before any operator ran.
func unpublish(t *testing.T, e *fsmtest.Env) {
	t.Helper()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("doors.testing.kfsm.dev")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fsm.AnnotationGraphPrefix+"door")
	if err := e.Client.Patch(t.Context(), crd, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// The page, in a real browser, against a real API server and a machine
// running under a manager: the machine appears when it publishes its
// graph, the counts follow the objects as they move without a reload,
// a state lists its objects and an object shows its timeline, and nothing
// is written or read from Secrets.
func TestDashboardInABrowser(t *testing.T) {
	p := browser.Open(t)
	e := fsmtest.New(t)
	unpublish(t, e)
	s := serve(t, e)
	secret := "kfsm-secret-" + uuid.NewString()
	e.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "door-code"}, StringData: map[string]string{"code": secret}})

	p.Do("opening the page", chromedp.Navigate(s.url), chromedp.WaitVisible(chromedp.CSS("#machines .machines")))
	if got := browser.Eval[string](p, `document.getElementById("machines").innerText`); !strings.Contains(got, "No machine has published its graph") {
		t.Errorf("before any operator ran, the page shows %q, want that no machine published its graph", got)
	}
	p.Do("marking the page", chromedp.Evaluate[chromedp.Void](`window.kfsmSamePage = true`))

	// The operator starts and publishes its graph: the page draws it.
	fsmtest.Run(e, doors())
	front, back, garage := door("front"), door("back"), door("garage")
	for _, d := range []*v1alpha1.Door{front, back, garage} {
		e.Create(d)
	}
	for _, d := range []*v1alpha1.Door{front, back, garage} {
		e.AwaitState(d, "Closed")
	}
	p.Await("the door machine's graph with three doors Closed",
		liveText("objects", "Closed")+` === "3" && `+liveText("objects", "Open")+` === "0"`, panelText, 30*time.Second)
	p.Screenshot("1-graph")
	for _, state := range []string{"Closed", "Open", "Removed"} {
		sel := fmt.Sprintf(`svg.graph a.state[data-machine="door"][data-state=%q]`, state)
		if !browser.Eval[bool](p, fmt.Sprintf(`document.querySelector(%q) !== null && document.querySelector(%q).textContent.includes(%q)`, sel, sel, state)) {
			t.Errorf("the graph has no box for state %s", state)
		}
	}
	graph := browser.Eval[string](p, `document.querySelector("svg.graph").textContent`)
	for _, want := range []string{"initial", "on delete, final", "timeout 1h"} {
		if !strings.Contains(graph, want) {
			t.Errorf("the graph does not say %q: %q", want, graph)
		}
	}
	if got := browser.Eval[string](p, liveText("edge", "start")); got != "3×" {
		t.Errorf("the arrow into the initial state shows %q, want 3× for the three doors created", got)
	}

	// A door opens: the counts follow within five seconds of its status.
	e.Update(front, func() { front.Spec.Open = true })
	e.AwaitState(front, "Open")
	took := p.Await("the counts to show the door that opened",
		liveText("objects", "Open")+` === "1" && `+liveText("objects", "Closed")+` === "2"`, panelText, 5*time.Second)
	t.Logf("the page showed the move %v after the status did", took.Round(time.Millisecond))
	if got := browser.Eval[string](p, liveText("noun", "Open")); got != " object" {
		t.Errorf("one object in Open reads %q objects, want the singular", got)
	}
	if got := browser.Eval[string](p, `document.querySelector("section.machine p.meta").innerText`); !strings.Contains(got, "3 objects.") {
		t.Errorf("the machine's line reads %q, want 3 objects", got)
	}
	if got := browser.Eval[string](p, liveText("edge", "0")); got != "1×" {
		t.Errorf("the edge Closed → Open shows %q, want 1×", got)
	}
	if !browser.Eval[bool](p, `window.kfsmSamePage === true`) {
		t.Error("the page reloaded to follow the cluster")
	}

	// A state lists its objects.
	p.Do("choosing state Open", chromedp.Click(chromedp.CSS(`svg.graph a.state[data-machine="door"][data-state="Open"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#panel a.object`)))
	if got := browser.Eval[string](p, panelText); !strings.Contains(got, e.Namespace+"/front") || strings.Contains(got, "/back") {
		t.Errorf("the panel of state Open lists %q, want the front door alone", got)
	}
	if !browser.Eval[bool](p, `document.querySelector('a.state[data-state="Open"]').getAttribute("aria-current") === "true"`) {
		t.Error("the chosen state is not marked as the current one")
	}
	p.Screenshot("2-state")
	// The list follows the objects too.
	e.Update(back, func() { back.Spec.Open = true })
	p.Await("the state's list to show the back door", panelText+`.includes("/back")`, panelText, 10*time.Second)

	// An object shows its timeline, events and conditions.
	p.Do("choosing the front door", chromedp.Click(chromedp.CSS(`#panel a.object[href$="/front"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#panel ol.timeline`)))
	p.Await("the front door's timeline, events and conditions", fmt.Sprintf(`[%q, %q, %q, %q].every(s => %s.includes(s))`,
		"created → Closed", "Closed → Open", "moved from Closed to Open", "Ready", panelText), panelText, 15*time.Second)
	p.Screenshot("3-object")

	// Readable at 1280×800: the page does not scroll sideways, and the
	// graph's names are drawn at a readable size.
	if got := browser.Eval[int](p, `document.documentElement.scrollWidth`); got > 1280 {
		t.Errorf("the page is %dpx wide at 1280×800, and scrolls sideways", got)
	}
	if got := browser.Eval[float64](p, `document.querySelector("svg.graph text.name").getBoundingClientRect().height`); got < 12 {
		t.Errorf("the states' names are drawn %.1fpx high, want at least 12", got)
	}
	if got := browser.Eval[string](p, `getComputedStyle(document.querySelector("svg.overview")).display`); got != "none" {
		t.Errorf("the door's graph, which fits its area, shows an overview (display %s)", got)
	}

	// The page ran without an error; the refused write below logs one.
	p.CheckQuiet()

	// Writes are refused, even from the page itself.
	if got := browser.Eval[int](p, `fetch("/", {method: "POST"}).then(r => r.status)`); got != 405 {
		t.Errorf("a POST from the page got %d, want 405", got)
	}

	// Nothing from Secrets, in anything the page got or the dashboard read.
	var fragments []string
	for _, url := range []string{"", "fragment/machines", "fragment/state?machine=door&state=Open", "fragment/object?machine=door&namespace=" + e.Namespace + "&name=front"} {
		fragments = append(fragments, browser.Eval[string](p, fmt.Sprintf(`fetch(%q).then(r => r.text())`, "/"+url)))
	}
	fragments = append(fragments, browser.Eval[string](p, `document.documentElement.outerHTML`))
	for _, f := range fragments {
		if strings.Contains(f, secret) || strings.Contains(f, "door-code") {
			t.Errorf("the dashboard shows something of the Secret:\n%s", f)
		}
	}
	s.checkReadOnly(t)
}

func door(name string) *v1alpha1.Door {
	return &v1alpha1.Door{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// markup is what the cluster may hold that a page would obey if it were
// written as HTML rather than as text.
const markup = `<img src=x onerror="window.kfsmPwned=1"><b>bold</b> & "quoted"`

// An object's panel shows its actions: each one's status word, key, age,
// heartbeat, progress and result or error; a lost run is marked by a
// class and in words; and what the cluster wrote is shown as text, never
// as markup.
func TestDashboardShowsAnObjectsActions(t *testing.T) {
	p := browser.Open(t)
	e := fsmtest.New(t)
	publishGadgets(t, e)
	now := time.Now()
	ago := func(d time.Duration) metav1.MicroTime { return metav1.NewMicroTime(now.Add(-d)) }
	const runningKey, lostKey = "5f0c3a9e1b7d4c2a8e6f0b1d3c5a7e9f", "9d4e1c7b2a3f50681e2d3c4b5a697887"
	long := strings.Repeat("copied a block; ", 30)
	gadget(t, e, "copier", fsm.Status{
		State: "Copying",
		Actions: []fsm.ActionRecord{
			// The ages are whole hours, which read the same for a minute.
			{Name: "copy", Key: runningKey, State: "Copying", Attempt: 1, Started: ago(3 * time.Hour), Heartbeat: ptr(ago(time.Hour)), Progress: long},
			{Name: "notify", Key: "a1b2c3d4e5f60718293a4b5c6d7e8f90", State: "Copying", Attempt: 1, Started: ago(3 * time.Hour), Outcome: "Succeeded", Ended: ptr(ago(2 * time.Hour)), Result: "sent"},
			{Name: "weigh " + markup, Key: "0e1d2c3b4a5968778695a4b3c2d1e0f1", State: "Copying", Attempt: 1, Started: ago(3 * time.Hour), Outcome: "Failed", Error: markup, Progress: markup},
		},
	})
	msg := "action call-vet (key " + lostKey + ") was running when its run was lost"
	gadget(t, e, "stuck", fsm.Status{
		State: "Copying",
		Conditions: []metav1.Condition{
			{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: fsm.ReasonActionIndeterminate, Message: msg, LastTransitionTime: metav1.NewTime(now)},
			{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: fsm.ReasonActionIndeterminate, Message: msg, LastTransitionTime: metav1.NewTime(now)},
		},
		Actions: []fsm.ActionRecord{{Name: "call-vet", Key: lostKey, State: "Copying", Attempt: 1, Started: ago(2 * time.Hour), Heartbeat: ptr(ago(time.Hour)), Progress: "dialled the vet"}},
	})
	s := serve(t, e)

	// The panel asks for the machine's objects once the page drew it: a
	// machine that the dashboard has not found yet is a 404.
	p.Do("opening the page", chromedp.Navigate(s.url))
	p.Await("the gadgets' machine", `document.querySelector('svg.graph a.state[data-machine="gadget-actions"]') !== null`, panelText, 30*time.Second)
	open := func(name string) {
		t.Helper()
		p.Do("opening "+name, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, "#object/gadget-actions/"+e.Namespace+"/"+name)))
		p.Await(name+"'s actions", fmt.Sprintf(`document.querySelector("#panel h2") !== null && document.querySelector("#panel h2").innerText.startsWith(%q) && document.querySelector("#panel ul.actions") !== null`, name), panelText, 30*time.Second)
	}
	row := func(class string) string {
		return browser.Eval[string](p, fmt.Sprintf(`[...document.querySelectorAll("#panel li.action-%s")].map(li => li.innerText).join("\n---\n")`, class))
	}
	says := func(what, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s does not say %q:\n%s", what, w, got)
			}
		}
	}

	open("copier")
	says("the running action", row("running"), "copy", "Running", "key "+runningKey, "started 3h ago", "heartbeat 1h ago", "progress: "+long[:clipAt-1]+"…")
	if got := browser.Eval[string](p, `document.querySelector("#panel li.action-running .progress").title`); got != long {
		t.Errorf("the clipped progress's tooltip is %q, want the whole of it", got)
	}
	says("the succeeded action", row("succeeded"), "notify", "Succeeded", "result: sent")
	says("the failed action", row("failed"), "weigh "+markup, "Failed", "progress: "+markup, "error: "+markup)
	if got := row("indeterminate"); got != "" {
		t.Errorf("an object that no lost run stalled shows an indeterminate action:\n%s", got)
	}
	if !browser.Eval[bool](p, `document.querySelector("#panel img, #panel b") === null && window.kfsmPwned === undefined`) {
		t.Errorf("what an action says became markup in the panel:\n%s", browser.Eval[string](p, `document.getElementById("panel").innerHTML`))
	}
	p.Screenshot("actions")

	open("stuck")
	says("the indeterminate action", row("indeterminate"), "call-vet", "Indeterminate", "key "+lostKey, "started 2h ago", "heartbeat 1h ago", "progress: dialled the vet",
		"whether it took effect is unknown", "kubectl fsm retry")
	if got := row("running"); got != "" {
		t.Errorf("the action that stalled the object shows as running:\n%s", got)
	}
	p.Screenshot("actions-indeterminate")

	p.CheckQuiet()
	s.checkReadOnly(t)
}

// publishGadgets publishes a machine's graph on the gadgets' CRD, as its
// operator would, until the test ends. No operator runs: the test writes
// the gadgets' status itself.
func publishGadgets(t *testing.T, e *fsmtest.Env) {
	t.Helper()
	m := fsm.New[*v1alpha1.Gadget]("gadget-actions", fsm.Lifecycle).
		Initial("Copying").
		State("Copying", func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result { return fsm.Next("Copied") }, fsm.To("Copied")).
		State("Copied", nil, fsm.Final())
	key, value, err := m.GraphAnnotation(gadgetsResource)
	if err != nil {
		t.Fatal(err)
	}
	annotateGadgets(t, e, key, value)
}

var gadgetsResource = fsm.PublishedResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Gadget", Resource: "gadgets"}

// annotateGadgets sets an annotation on the gadgets' CRD until the test
// ends.
func annotateGadgets(t *testing.T, e *fsmtest.Env, key, value string) {
	t.Helper()
	patch := func(value any) {
		crd := &metav1.PartialObjectMetadata{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		crd.SetName("gadgets.testing.kfsm.dev")
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Client.Patch(context.Background(), crd, client.RawPatch(types.MergePatchType, data)); err != nil {
			t.Fatal(err)
		}
	}
	patch(value)
	// TestDashboardInABrowser starts with no machine published.
	t.Cleanup(func() { patch(nil) })
}

// gadget creates a gadget with status st.
func gadget(t *testing.T, e *fsmtest.Env, name string, st fsm.Status) {
	t.Helper()
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name}}
	e.Create(g)
	st.ObservedGeneration = g.Generation
	g.Status.Status = st
	if err := e.Client.Status().Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
