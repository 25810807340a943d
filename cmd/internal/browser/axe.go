package browser

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/chromedp/chromedp"

	"github.com/kfsm/kfsm/internal/filelock"
)

// axe-core, the accessibility engine that the tests run in their pages.
// Its version is pinned, and so is the integrity that npm's registry
// gives for its tarball (the dist.integrity of
// https://registry.npmjs.org/axe-core/4.14.1): the tarball is checked
// against it before anything in it is used.
const (
	AxeVersion   = "4.14.1"
	axeTarball   = "https://registry.npmjs.org/axe-core/-/axe-core-" + AxeVersion + ".tgz"
	axeIntegrity = "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
	// axeScript is the file that the tarball holds and the cache keeps.
	axeScript = "axe.min.js"
	// maxTarball bounds what the registry may send: the tarball is
	// about 600 kB.
	maxTarball = 64 << 20
)

// Axe returns axe-core's script, axe.min.js, from the user cache, into
// which it fetches it from npm's registry on first use. It writes what it
// does to progress (nil discards it). A file lock keeps parallel test
// binaries from fetching at once.
func Axe(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	c := &axeCache{
		dir: filepath.Join(cache, "kfsm", "axe-core-"+AxeVersion), url: axeTarball, integrity: axeIntegrity,
		progress: progress, client: http.DefaultClient,
	}
	return c.ensure(ctx)
}

// axeCache keeps one version of axe-core's script in dir.
type axeCache struct {
	dir, url, integrity string
	progress            io.Writer
	client              *http.Client
}

// ensure returns the cached script, fetching it first when it is missing.
func (c *axeCache) ensure(ctx context.Context) (string, error) {
	path := filepath.Join(c.dir, axeScript)
	// A warm cache takes no lock: the script is renamed into place whole.
	if data, err := os.ReadFile(path); err == nil {
		return string(data), nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the cache directory: %w", err)
	}
	unlock, err := filelock.Lock(ctx, c.dir+".lock", func() {
		fmt.Fprintf(c.progress, "browser: waiting for another process that is fetching axe-core into %s\n", c.dir)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	data, err := os.ReadFile(path)
	if err == nil {
		return string(data), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	fmt.Fprintf(c.progress, "browser: fetching axe-core %s from %s into %s\n", AxeVersion, c.url, c.dir)
	tarball, err := c.fetch(ctx)
	if err != nil {
		return "", err
	}
	if err := checkIntegrity(tarball, c.integrity); err != nil {
		return "", fmt.Errorf("%s: %w", c.url, err)
	}
	script, err := fileInTarball(tarball, "package/"+axeScript)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.url, err)
	}
	tmp, err := os.CreateTemp(c.dir, "."+axeScript+"-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(script); err != nil {
		_ = tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return string(script), nil
}

// fetch downloads the tarball.
func (c *axeCache) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching axe-core: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching axe-core: %s answered %s", c.url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTarball+1))
	if err != nil {
		return nil, fmt.Errorf("fetching axe-core: %w", err)
	}
	if len(data) > maxTarball {
		return nil, fmt.Errorf("fetching axe-core: %s sent more than %d bytes", c.url, maxTarball)
	}
	return data, nil
}

// checkIntegrity checks data against a Subresource Integrity string of
// the sha512 kind, as npm's registry gives them.
func checkIntegrity(data []byte, integrity string) error {
	encoded, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return fmt.Errorf("the pinned integrity %q is not a sha512 one", integrity)
	}
	want, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return fmt.Errorf("the pinned integrity %q: %w", integrity, err)
	}
	got := sha512.Sum512(data)
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return fmt.Errorf("the tarball's integrity is sha512-%s, want %s: it is not the one the registry published", base64.StdEncoding.EncodeToString(got[:]), integrity)
	}
	return nil
}

// fileInTarball returns a regular file of a gzipped tarball.
func fileInTarball(tgz []byte, name string) ([]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the tarball holds no %s", name)
		}
		if err != nil {
			return nil, err
		}
		if h.Name == name && h.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, maxTarball))
		}
	}
}

// axeViolation is what the test says of a rule the page breaks.
type axeViolation struct {
	ID      string   `json:"id"`
	Impact  string   `json:"impact"`
	Help    string   `json:"help"`
	Targets []string `json:"targets"`
}

// runAxe runs axe-core's default rules (WCAG A and AA, and its best
// practices) on the document, and lists the rules broken.
const runAxe = `axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations.map(v => ({
	id: v.id, impact: v.impact || "", help: v.help,
	targets: v.nodes.map(n => n.target.map(String).join(" ")),
})))`

// CheckAccessible runs axe-core in the page, as it is now, and fails the
// test for each rule that the page breaks, with the rule's id, its impact
// and the elements that break it.
func (p *Page) CheckAccessible(what string) {
	p.t.Helper()
	script, err := Axe(p.t.Context(), testWriter{p.t})
	if err != nil {
		p.t.Fatalf("this test needs axe-core, and it could be neither found nor fetched: %v", err)
	}
	if !Eval[bool](p, `typeof window.axe === "object"`) {
		p.Do("loading axe-core", chromedp.Evaluate[chromedp.Void](script))
	}
	for _, v := range Eval[[]axeViolation](p, runAxe) {
		p.t.Errorf("%s: axe-core: %s (%s): %s, in %d elements:\n\t%s", what, v.ID, v.Impact, v.Help, len(v.Targets), strings.Join(v.Targets, "\n\t"))
	}
}
