package browser

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Page is a headless Chromium tab at 1280×800 that a test drives.
type Page struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // exceptions and errors the page logged
	shots    string   // where screenshots go
}

// Open starts Chromium (see Find) with one tab for t, closed when t ends;
// screenshots go to t's artifact directory. A test that cannot have a
// browser fails, unless -short skips the browser tests.
func Open(t *testing.T) *Page {
	t.Helper()
	if testing.Short() {
		t.Skip("the browser tests are skipped with -short")
	}
	c, err := Find(t.Context(), testWriter{t})
	if err != nil {
		t.Fatalf("this test needs Chromium, and it could be neither found nor fetched: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(c.Path), chromedp.Env(c.Env...),
		// The browser runs as whoever runs the tests, root included, and
		// loads only pages from loopback.
		chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	p := &Page{t: t, ctx: ctx, shots: t.ArtifactDir()}
	messages := chromedp.Console(ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("starting %s (%s): %v", c.Version, c.Path, err)
	}
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	t.Logf("%s; screenshots go to %s", c.Version, p.shots)
	return p
}

// Do runs steps, failing the test with a screenshot if one fails.
func (p *Page) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.Screenshot("failed")
		p.t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a JavaScript expression into T.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// Await waits until a JavaScript expression is true and returns how long
// that took; if it is not within timeout, the test fails with a
// screenshot and what shown says (a JavaScript expression).
func (p *Page) Await(what, expr, shown string, timeout time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(20*time.Millisecond)))
	if err != nil {
		p.Screenshot("failed")
		p.t.Fatalf("%s did not happen within %v: %v\nthe page shows: %s", what, timeout, err, Eval[string](p, shown))
	}
	return time.Since(start)
}

// PrefersColorScheme makes the page's prefers-color-scheme "light" or
// "dark"; "" gives it the system's again.
func (p *Page) PrefersColorScheme(scheme string) {
	p.t.Helper()
	features := []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
	p.Do("preferring the colour scheme "+scheme, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features})
		return err
	}))
}

// Screenshot saves the tab as name.png among the test's artifacts.
func (p *Page) Screenshot(name string) {
	p.t.Helper()
	p.SaveScreenshot(filepath.Join(p.shots, name+".png"))
}

// SaveScreenshot saves the tab as a PNG file at path.
func (p *Page) SaveScreenshot(path string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Errorf("screenshot %s: %v", path, err)
		return
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Error(err)
	}
}

// CheckQuiet fails the test if the page logged an error or threw.
func (p *Page) CheckQuiet() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		p.t.Errorf("the page logged: %s", m)
	}
}

// testWriter writes into a test's log, a line at a time.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
