package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/cmd/internal/browser"
	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
	"github.com/kfsm/kfsm/examples/moose"
	moosev1 "github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/proctest"
)

// The demo, started once for both: it serves its dashboard and kubectl
// fsm, and the dashboard in a browser follows the herd; then it stops
// cleanly when interrupted. The browser's part pauses the herd, so it
// comes second.
func TestDemoServesItsDashboard(t *testing.T) {
	kubeconfig, url, stopDemo := startDemo(t)
	t.Run("AndKubectlFsm", func(t *testing.T) { demoServesTheDashboardAndKubectlFsm(t, kubeconfig, url) })
	t.Run("InABrowser", func(t *testing.T) { demoDashboardInABrowser(t, kubeconfig, url) })
	if err := stopDemo(); err != nil {
		t.Fatalf("interrupted, the demo returned %v, want nil", err)
	}
}

// The demo serves the dashboard and prints its address, and the dashboard
// shows the four machines once their operators publish their graphs; kfsm
// dashboard, given the demo's kubeconfig, serves them too. Both refuse
// writes, and kfsm dashboard stops cleanly. The real kubectl runs kubectl
// fsm on the demo's cluster.
func demoServesTheDashboardAndKubectlFsm(t *testing.T, kubeconfig, demoURL string) {
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	if !strings.HasPrefix(demoURL, "http://127.0.0.1:") {
		t.Errorf("the demo's dashboard is at %s, want a loopback address", demoURL)
	}
	awaitDemoMachines(t, demoURL)
	dashboardRequest(t, http.MethodPost, demoURL, http.StatusMethodNotAllowed)
	kubectlFsmOnTheDemo(t, kubeconfig)

	dashCtx, stopDashboard := context.WithCancel(ctx)
	defer stopDashboard()
	dr, dw := io.Pipe()
	cmd := newDashboardCommand()
	cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "--address", "127.0.0.1:0"})
	cmd.SetOut(dw)
	served := make(chan error, 1)
	go func() {
		served <- cmd.ExecuteContext(dashCtx)
		_ = dw.Close()
	}()
	line, err := bufio.NewReader(dr).ReadString('\n')
	if err != nil {
		t.Fatalf("kfsm dashboard printed no address: %v; it returned %v", err, <-served)
	}
	go func() { _, _ = io.Copy(io.Discard, dr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "dashboard: ")
	if !ok {
		t.Fatalf("kfsm dashboard printed %q first, want its address", line)
	}
	awaitDemoMachines(t, url)
	dashboardRequest(t, http.MethodPost, url, http.StatusMethodNotAllowed)
	stopDashboard()
	if err := <-served; err != nil {
		t.Errorf("interrupted, kfsm dashboard returned %v, want nil", err)
	}
}

// awaitDemoMachines waits until the dashboard at url draws the demo's
// four machines.
func awaitDemoMachines(t *testing.T, url string) {
	t.Helper()
	want := []string{">autoupdate</h2>", ">database</h2>", ">moose</h2>", ">webapp</h2>"}
	var page string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		page = dashboardRequest(t, http.MethodGet, url+"fragment/machines", http.StatusOK)
		drawn := strings.Contains(page, "<svg")
		for _, w := range want {
			drawn = drawn && strings.Contains(page, w)
		}
		if drawn {
			return
		}
	}
	t.Fatalf("the dashboard at %s does not show the four machines within a minute:\n%s", url, page)
}

// dashboardRequest makes a request and returns the body of the answer,
// failing the test unless its status is want.
func dashboardRequest(t *testing.T, method, url string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d", method, url, resp.Status, want)
	}
	return string(body)
}

var readmeScreenshot = flag.String("screenshot", "", "also save the demo's dashboard as this PNG file, for the README")

// The acceptance of the demo's dashboard, in a real browser: the page at
// the printed address shows the herd, and within 5 s of a moose moving
// the counts per state change to the cluster's. All moose but one are
// paused with kfsm's annotation, so that only that one moves.
func demoDashboardInABrowser(t *testing.T, kubeconfig, url string) {
	p := browser.Open(t)
	ctx := t.Context()
	c := demoClient(t, kubeconfig)

	states := []fsm.State{moose.Tagged, moose.Roaming, moose.Eating, moose.Sleeping, moose.Released}
	var shown []string
	for _, s := range states {
		// An element's data-live is the JSON of [kind, machine, key].
		live, _ := json.Marshal([]string{"objects", "moose", string(s)})
		key, _ := json.Marshal(string(live))
		shown = append(shown, fmt.Sprintf(`(([...document.querySelectorAll("[data-live]")].find(e => e.dataset.live === %s) || {}).textContent || "?")`, key))
	}
	pageCounts := "[" + strings.Join(shown, ", ") + "].join(\" \")"
	const panel = `document.getElementById("machines").innerText`
	p.Do("opening the demo's dashboard", chromedp.Navigate(url))
	p.Await("the herd on the page", fmt.Sprintf(`!%s.includes("?") && %s.includes("webapp") && %s.includes("25 objects")`, pageCounts, panel, panel), panel, time.Minute)
	if *readmeScreenshot != "" {
		time.Sleep(20 * time.Second) // the herd spreads over its states
		roaming := `svg.graph a.state[data-machine="moose"][data-state="Roaming"]`
		p.Do("choosing the roaming moose", chromedp.ScrollIntoView(chromedp.CSS(roaming)), chromedp.Click(chromedp.CSS(roaming)),
			chromedp.WaitVisible(chromedp.CSS(`#panel a.object`)))
		if got := browser.Eval[string](p, `[...document.querySelectorAll("section.machine p.meta")].map(e => e.innerText).join("\n")`); !strings.Contains(got, " 1 object.") {
			t.Errorf("the machines' lines read %q, want one with 1 object", got)
		}
		p.SaveScreenshot(*readmeScreenshot)
	}
	p.Screenshot("demo")

	herd := &moosev1.MooseList{}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if err := c.List(ctx, herd, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		placed := len(herd.Items) > 1
		for _, m := range herd.Items {
			placed = placed && m.Status.State != ""
		}
		if placed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo's herd was not placed in its states within a minute: %d moose", len(herd.Items))
		}
	}
	mover := herd.Items[0].Name
	for _, m := range herd.Items[1:] {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, fsm.AnnotationPaused)
		if err := c.Patch(ctx, &m, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	// clusterCounts is the herd's count per state, once every other moose
	// says it is paused.
	clusterCounts := func() (string, fsm.State, bool) {
		if err := c.List(ctx, herd, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		counts := map[fsm.State]int{}
		var state fsm.State
		paused := true
		for _, m := range herd.Items {
			counts[m.Status.State]++
			if m.Name == mover {
				state = m.Status.State
			} else {
				paused = paused && apimeta.IsStatusConditionTrue(m.Status.Conditions, fsm.ConditionPaused)
			}
		}
		var out []string
		for _, s := range states {
			out = append(out, fmt.Sprint(counts[s]))
		}
		return strings.Join(out, " "), state, paused
	}
	var before string
	var from fsm.State
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var paused bool
		if before, from, paused = clusterCounts(); paused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the herd was not paused within a minute")
		}
	}
	p.Await("the page to show the paused herd's counts "+before, fmt.Sprintf(`%s === %q`, pageCounts, before), pageCounts, 5*time.Second)

	// The one moose that is not paused moves (a light moose may roam for
	// two minutes); the page follows within 5 s.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		after, to, _ := clusterCounts()
		if to == from {
			if time.Now().After(deadline) {
				t.Fatalf("%s stayed in %s for three minutes", mover, from)
			}
			continue
		}
		took := p.Await(fmt.Sprintf("the page to show %s's move %s → %s (counts %s → %s)", mover, from, to, before, after),
			fmt.Sprintf(`%s === %q`, pageCounts, after), pageCounts, 5*time.Second)
		t.Logf("%s moved %s → %s; the page showed it %v later", mover, from, to, took.Round(time.Millisecond))
		break
	}
	p.Screenshot("demo-moved")
	p.CheckQuiet()
}

// demoClient is a client of the demo's cluster that knows moose.
func demoClient(t *testing.T, kubeconfig string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := moosev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectlFsmOnTheDemo runs the real kubectl, which finds kubectl-fsm on
// its PATH, on the demo's cluster.
func kubectlFsmOnTheDemo(t *testing.T, kubeconfig string) {
	t.Helper()
	plugin := proctest.Build(t, "../kubectl-fsm")
	if filepath.Base(plugin) != kubectlfsm.PluginName {
		t.Fatalf("the plugin was built as %s, want it named %s for kubectl to find", plugin, kubectlfsm.PluginName)
	}
	bin := filepath.Dir(plugin)
	assets, err := cluster.EnsureAssets(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) *exec.Cmd {
		cmd := exec.Command(assets.Kubectl(), append(args, "--kubeconfig", kubeconfig, "-n", "default")...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		return cmd
	}
	// The demo creates the herd, then the web apps; shop waits in
	// Available for a Deployment that no controller runs here.
	var state []byte
	for deadline := time.Now().Add(time.Minute); string(state) != "Available"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("web app shop is in state %q a minute after the demo started, want Available", state)
		}
		state, _ = kubectl("get", "webapp", "shop", "-o", "jsonpath={.status.state}").Output()
	}
	// The history keeps the last ten transitions, so that of a moose
	// that has roamed for long no longer shows its creation: describe is
	// asked for one of the herd's moves, whichever they are.
	transition := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +(\(new\)|Tagged|Roaming|Eating|Sleeping) → (Tagged|Roaming|Eating|Sleeping)  +[A-Z]`
	for _, c := range []struct {
		args []string
		want []string // regular expressions
	}{
		{[]string{"fsm", "graph", "moose", "--counts"}, []string{regexp.QuoteMeta("machine moose (examples.kfsm.dev/v1alpha1 Moose, Lifecycle mode)"), "│  Roaming", "initial · "}},
		{[]string{"fsm", "get", "moose"}, []string{"NAME      STATE", "25 objects: "}},
		{[]string{"fsm", "describe", "moose/moose-01"}, []string{"Name:       moose-01", "History:\n  " + transition, "Conditions:"}},
		{[]string{"fsm", "why", "webapp/shop"}, []string{"webapps/shop is not Ready: it has been in state Available for", "WaitingForDeployment"}},
		{[]string{"fsm", "retry", "moose/moose-02"}, []string{"moose/moose-02 asked to retry"}},
	} {
		out, err := kubectl(c.args...).CombinedOutput()
		for _, want := range c.want {
			if !regexp.MustCompile(want).Match(out) {
				t.Errorf("kubectl %s: %v\n%s\nwant it to match %q", strings.Join(c.args, " "), err, out, want)
			}
		}
	}
	if out, err := kubectl("get", "moose", "moose-02", "-o", "jsonpath={.metadata.annotations}").CombinedOutput(); err != nil || !strings.Contains(string(out), fsm.AnnotationRetry) {
		t.Errorf("after kubectl fsm retry, moose-02's annotations are %s (%v), want %s", out, err, fsm.AnnotationRetry)
	}

	// watch prints the herd's moves, a line each, until it is stopped.
	watch := kubectl("fsm", "watch", "moose")
	lines, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = watch.Process.Kill()
		_ = watch.Wait()
	}()
	move := regexp.MustCompile(`^\d\d:\d\d:\d\d  default/moose-\d\d  (Tagged|Roaming|Eating|Sleeping) → (Roaming|Eating|Sleeping)  Next$`)
	seen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(lines)
		for sc.Scan() {
			if move.MatchString(sc.Text()) {
				seen <- sc.Text()
				return
			}
		}
	}()
	select {
	case line := <-seen:
		t.Logf("kubectl fsm watch: %s", line)
	case <-time.After(time.Minute):
		t.Error("kubectl fsm watch printed no move of the herd in a minute")
	}
}

// startDemo runs kfsm demo until stop, which interrupts it and returns
// what it returned, and reads the kubeconfig and the dashboard address
// that it prints.
func startDemo(t *testing.T) (kubeconfig, url string, stop func() error) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	ctx, interrupt := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw, "demo", "--duration", "5m")
		_ = pw.Close()
	}()
	stop = func() error {
		interrupt()
		return <-done
	}
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "kubeconfig: "); ok {
			kubeconfig = path
		}
		if u, ok := strings.CutPrefix(sc.Text(), "dashboard: "); ok {
			url = u
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" || kubeconfig == "" {
		t.Fatalf("the demo printed no dashboard address or no kubeconfig; it returned %v", stop())
	}
	t.Cleanup(func() { interrupt() })
	return kubeconfig, url, stop
}
