package dashboard

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cmd/internal/browser"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

var (
	fleetObjects = flag.Int("dashboard.objects", 300, "how many objects TestTheDashboardAtAFleetsSize places on the 50-state machine")
	fleetShots   = flag.String("dashboard.screenshots", "", "also save the 50-state machine's page, light and dark, as PNG files in this directory")
)

// placeGadgets creates gadgets c-00000, c-00001, … and writes each one's
// status: in the state that state(i) names, with a history that entered it
// from the state before it in the graph. Sixteen writers share the work.
func placeGadgets(t *testing.T, e *fsmtest.Env, from, to int, state func(i int) graph.State) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := placeGadget(t.Context(), e, i, state(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		defer close(next)
		for i := from; i < to; i++ {
			select {
			case next <- i:
			case <-t.Context().Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func placeGadget(ctx context.Context, e *fsmtest.Env, i int, state graph.State) error {
	g := &v1alpha1.Gadget{}
	key := client.ObjectKey{Namespace: e.Namespace, Name: fmt.Sprintf("c-%05d", i)}
	if err := e.Client.Get(ctx, key, g); err != nil {
		g = &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := e.Client.Create(ctx, g); err != nil {
			return fmt.Errorf("creating %s: %w", key, err)
		}
	}
	now := metav1.Now()
	from := fsm.State("Pending")
	if g.Status.State != "" {
		from = g.Status.State
	}
	g.Status.Status = fsm.Status{
		State: fsm.State(state), StateSince: &now, ObservedGeneration: g.Generation,
		History: append(g.Status.History, fsm.Transition{From: from, To: fsm.State(state), Reason: fsm.ReasonNext, Time: now}),
	}
	if i%97 == 0 {
		g.Status.Conditions = []metav1.Condition{{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: "RetriesExhausted", Message: "gave up", LastTransitionTime: now}}
	}
	if err := e.Client.Status().Update(ctx, g); err != nil {
		return fmt.Errorf("placing %s in %s: %w", key, state, err)
	}
	return nil
}

// clusterCounts is how many gadgets the API server has in each state of
// g, as JSON.
func clusterCounts(t *testing.T, e *fsmtest.Env, g *graph.Graph) string {
	t.Helper()
	var list v1alpha1.GadgetList
	// Every namespace: earlier tests' gadgets stay, and the page counts them.
	if err := e.Client.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, o := range list.Items {
		if _, ok := g.Lookup(graph.State(o.Status.State)); ok {
			counts[string(o.Status.State)]++
		}
	}
	data, _ := json.Marshal(counts)
	return string(data)
}

// pageCounts is a JavaScript expression: the page's count of objects in
// each state of the fleet machine, without the states it shows empty.
const pageCounts = `(() => {
  const out = {};
  for (const el of document.querySelectorAll("[data-live]")) {
    const [kind, machine, state] = JSON.parse(el.dataset.live);
    if (kind === "objects" && machine === "managed-cluster" && el.textContent !== "0") out[state] = Number(el.textContent);
  }
  return JSON.stringify(Object.fromEntries(Object.entries(out).sort()));
})()`

// countsOutsideBoxes lists the states whose count line is wider than
// their box.
const countsOutsideBoxes = `[...document.querySelectorAll("a.state")].flatMap(a => {
  const box = a.querySelector("rect").getBBox(), text = a.querySelector("text.count").getBBox();
  return text.x < box.x || text.x + text.width > box.x + box.width ? [a.dataset.state + ": " + a.querySelector("text.count").textContent] : [];
})`

// The page at the size of a real operator's fleet: a 50-state machine
// with many objects (300 in make test, 10,000 in make fleet-test). The
// counts equal the cluster's within five seconds of a change, and a
// search narrows every object to one in under a second.
func TestTheDashboardAtAFleetsSize(t *testing.T) {
	p := browser.Open(t)
	e := fsmtest.New(t)
	g := publishFleet(t, e)
	n := *fleetObjects
	began := time.Now()
	placeGadgets(t, e, 0, n, func(i int) graph.State { return g.States[i*i%len(g.States)].Name })
	t.Logf("%d gadgets created and placed in %v", n, time.Since(began).Round(time.Millisecond))
	s := serve(t, e)
	p.Do("opening the page at 1,440 × 900", chromedp.EmulateViewport(1440, 900), chromedp.Navigate(s.url),
		chromedp.WaitVisible(chromedp.CSS(`svg.graph a.state[data-machine="managed-cluster"]`)))
	want := clusterCounts(t, e, g)
	took := p.Await(fmt.Sprintf("the page to count the %d gadgets as the cluster does", n),
		pageCounts+" === "+jsString(want), pageCounts, time.Minute)
	t.Logf("the page counted %d objects %v after it opened", n, took.Round(time.Millisecond))
	if over := browser.Eval[[]string](p, countsOutsideBoxes); len(over) > 0 {
		t.Errorf("the counts of %d states run out of their boxes: %s", len(over), strings.Join(over, "; "))
	}

	// A hundred gadgets move: the page follows within five seconds.
	placeGadgets(t, e, 0, min(n, 100), func(i int) graph.State { return g.States[(i*i+7)%len(g.States)].Name })
	written := time.Now()
	want = clusterCounts(t, e, g)
	p.Await("the page to follow 100 moves", pageCounts+" === "+jsString(want), pageCounts, 5*time.Second-time.Since(written))
	t.Logf("the page showed 100 moves within %v of their last write", time.Since(written).Round(time.Millisecond))

	if *fleetShots != "" {
		shoot(t, p)
	}

	// A search narrows every object to one.
	name := fmt.Sprintf("c-%05d", n/2+1)
	found := fmt.Sprintf(`(document.querySelector("#panel .found") || {}).textContent === "1 object." && document.querySelector("#panel a.object").textContent.endsWith(%q)`, "/"+name)
	p.Do("typing a name into the search box", chromedp.Focus(chromedp.CSS("#search")))
	start := time.Now()
	p.Do("typing", chromedp.SendKeys(chromedp.CSS("#search"), name))
	p.Await("the search to find "+name+" alone", found, panelText, time.Second)
	t.Logf("the search found %s among %d objects %v after the last key", name, n, time.Since(start).Round(time.Millisecond))

	// Closing the details gives the graph the whole width again.
	p.Do("closing the details", chromedp.Click(chromedp.CSS("button.close-panel")))
	p.Await("the details to close and the graph to fit the width", `!document.body.classList.contains("panel-open") && `+statesOutOfSight+`.length === 0 && document.querySelector("#search").value === ""`, panelText, 5*time.Second)
	p.CheckQuiet()
	s.checkReadOnly(t)
}

// shoot saves the page, in light and in dark mode.
func shoot(t *testing.T, p *browser.Page) {
	t.Helper()
	p.SaveScreenshot(filepath.Join(*fleetShots, "dashboard-fleet.png"))
	p.PrefersColorScheme("dark")
	p.SaveScreenshot(filepath.Join(*fleetShots, "dashboard-fleet-dark.png"))
	p.PrefersColorScheme("")
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
