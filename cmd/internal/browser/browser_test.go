package browser

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestToInstall(t *testing.T) {
	cases := map[string]struct {
		reason    string
		simulated string
		want      []string
	}{
		"FreshMachine": {
			reason: "every package that apt-get would install is fetched, in its order",
			simulated: `NOTE: This is only a simulation!
Reading package lists...
Inst libdouble-conversion3 (3.2.1-1 Debian:12.14/oldstable [amd64])
Inst libudev1 [252.38-1~deb12u1] (252.39-1~deb12u1 Debian:12.14/oldstable [amd64])
Inst chromium-common (148.0.7778.167-1~deb12u1 Debian-Security:12/oldstable-security [amd64])
Inst chromium (148.0.7778.167-1~deb12u1 Debian-Security:12/oldstable-security [amd64])
Conf libdouble-conversion3 (3.2.1-1 Debian:12.14/oldstable [amd64])
Conf chromium (148.0.7778.167-1~deb12u1 Debian-Security:12/oldstable-security [amd64])
`,
			want: []string{"libdouble-conversion3", "libudev1", "chromium-common", "chromium"},
		},
		"ChromiumInstalled": {
			reason:    "a system that has chromium still gets it in the cache",
			simulated: "chromium is already the newest version (148.0.7778.167-1~deb12u1).\n0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n",
			want:      []string{"chromium-common", "chromium"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, toInstall([]byte(tc.simulated))); diff != "" {
				t.Errorf("%s\ntoInstall: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestPathEnvNamesABrokenBrowser(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "chromium")
	t.Setenv(PathEnv, missing)
	_, err := Find(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), PathEnv+"="+missing) {
		t.Fatalf("Find with %s naming a missing file returned %v, want an error that names the variable", PathEnv, err)
	}
}

// The browser that Find returns renders a page headless, in the
// environment it asks for.
func TestFindReturnsAChromiumThatRenders(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches Chromium the first time; skipped with -short")
	}
	c, err := Find(t.Context(), testWriter{t})
	if err != nil {
		t.Fatalf("no Chromium to test with: %v", err)
	}
	if !strings.HasPrefix(c.Version, "Chromium ") && !strings.Contains(c.Version, "Chrome") {
		t.Errorf("the browser says it is %q, want Chromium or Chrome", c.Version)
	}
	page := filepath.Join(t.TempDir(), "page.html")
	html := `<p id="x">kfsm</p><script>document.getElementById("x").textContent += " runs"</script>`
	if err := os.WriteFile(page, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), c.Path, "--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+page)
	cmd.Env = append(os.Environ(), c.Env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("running %s headless: %v", c.Path, err)
	}
	if !strings.Contains(string(out), `<p id="x">kfsm runs</p>`) {
		t.Errorf("the page the browser rendered is not the one asked for:\n%s", out)
	}
}
