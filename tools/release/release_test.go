package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/modfile"
)

// isolateGit keeps git in tests from the machine's configuration (which
// may sign commits, say) and gives it an author.
func isolateGit(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL": os.DevNull, "GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME": "Release Test", "GIT_AUTHOR_EMAIL": "release-test@kfsm.invalid",
		"GIT_COMMITTER_NAME": "Release Test", "GIT_COMMITTER_EMAIL": "release-test@kfsm.invalid",
	} {
		t.Setenv(k, v)
	}
}

// gitT runs git in dir, failing the test if it fails.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kit is a repository laid out as kfsm's, in small: a root module, lib,
// which requires it, and app, which requires both, joined by go.work,
// whose replace directives stand for the requirements' version. It returns
// the repository's directory, with everything committed. The go command
// has no module proxy, and a module cache of the test's own.
func kit(t *testing.T) string {
	t.Helper()
	isolateGit(t)
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "-modcacherw")
	t.Setenv("GOMODCACHE", filepath.Join(t.TempDir(), "mod"))
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./app\n\t./lib\n)\n\n" +
			"// The modules require one another at the last release.\n" +
			"replace (\n\texample.com/kit v0.1.0 => ./\n\texample.com/kit/lib v0.1.0 => ./lib\n)\n",
		"go.mod":       "module example.com/kit\n\ngo 1.26.0\n",
		"kit.go":       "package kit\n\n// Name is the kit's name.\nconst Name = \"kit\"\n",
		"LICENSE":      "The kit's license.\n",
		".gitignore":   "dist/\n",
		"CHANGELOG.md": "# Changelog\n\n## [0.1.0] - 2026-01-31\n\n- The first release.\n",
		"lib/go.mod":   "module example.com/kit/lib\n\ngo 1.26.0\n\nrequire example.com/kit v0.1.0\n",
		"lib/lib.go":   "package lib\n\nimport \"example.com/kit\"\n\n// Name is the kit's name.\nfunc Name() string { return kit.Name }\n",
		"app/go.mod": "module example.com/kit/app\n\ngo 1.26.0\n\n" +
			"require (\n\texample.com/kit v0.1.0\n\texample.com/kit/lib v0.1.0\n)\n",
		"app/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/kit\"\n\t\"example.com/kit/lib\"\n)\n\n" +
			"func main() { fmt.Println(kit.Name, lib.Name()) }\n",
	} {
		write(t, dir, name, content)
	}
	gitT(t, dir, "init", "--quiet")
	commit(t, dir, "the kit")
	return dir
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	file := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commit(t *testing.T, dir, msg string) string {
	t.Helper()
	gitT(t, dir, "add", "--all")
	gitT(t, dir, "commit", "--quiet", "--message", msg)
	return gitT(t, dir, "rev-parse", "HEAD")
}

// newRelease is a release of repo whose tests pass and count their runs.
func newRelease(repo, version, tested string) (*release, *int) {
	runs := new(int)
	return &release{repo: repo, version: version, tested: tested, out: io.Discard, test: func(context.Context) error {
		*runs++
		return nil
	}}, runs
}

// buildsFromAProxy has the go command build app from the modules' tags
// served by a module proxy, outside the workspace, with its go.mod and
// go.sum as they are: it fails if a requirement or a checksum is wrong.
func buildsFromAProxy(t *testing.T, repo, version string) {
	t.Helper()
	mods, err := workspaceModules(repo)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := writeProxy(proxy, repo, mods, version); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = filepath.Join(repo, "app")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=file://"+filepath.ToSlash(proxy), "GOSUMDB=off", "GOFLAGS=-mod=readonly -modcacherw")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of app from the tags %s on a module proxy: %v\n%s", version, err, out)
	}
}

func TestReleaseTagsEachModuleAtTheReleaseCommit(t *testing.T) {
	repo := kit(t)
	tested := gitT(t, repo, "rev-parse", "HEAD")
	r, runs := newRelease(repo, "v0.1.0", "")
	if err := r.run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if *runs != 1 {
		t.Errorf("the tests ran %d times, want once: no TESTED commit was given", *runs)
	}
	head := gitT(t, repo, "rev-parse", "HEAD")
	if parent := gitT(t, repo, "rev-parse", "HEAD^"); parent != tested {
		t.Errorf("the release commit's parent is %s, want the commit released, %s", parent, tested)
	}
	for _, tag := range []string{"v0.1.0", "lib/v0.1.0", "app/v0.1.0"} {
		if kind := gitT(t, repo, "cat-file", "-t", tag); kind != "tag" {
			t.Errorf("%s is a %s, want an annotated tag", tag, kind)
		}
		if at := gitT(t, repo, "rev-parse", tag+"^{commit}"); at != head {
			t.Errorf("%s tags %s, want the release commit %s", tag, at, head)
		}
	}
	if status := gitT(t, repo, "status", "--porcelain"); status != "" {
		t.Errorf("the release left changes behind:\n%s", status)
	}
	buildsFromAProxy(t, repo, "v0.1.0")
}

func TestReleaseRequiresTheNewVersionEverywhere(t *testing.T) {
	repo := kit(t)
	r, _ := newRelease(repo, "v0.1.0", gitT(t, repo, "rev-parse", "HEAD"))
	if err := r.run(t.Context()); err != nil {
		t.Fatal(err)
	}
	write(t, repo, "CHANGELOG.md", "# Changelog\n\n## [0.2.0] - 2026-02-28\n\n- The second release.\n\n## [0.1.0] - 2026-01-31\n\n- The first release.\n")
	r, runs := newRelease(repo, "v0.2.0", commit(t, repo, "the second release's changes"))
	if err := r.run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if *runs != 0 {
		t.Errorf("the tests ran %d times, want none: the released commit passed them", *runs)
	}

	app, err := readGoMod(repo, module{dir: "app"})
	if err != nil {
		t.Fatal(err)
	}
	var requires []string
	for _, r := range app.Require {
		requires = append(requires, r.Mod.String())
	}
	if diff := cmp.Diff([]string{"example.com/kit@v0.2.0", "example.com/kit/lib@v0.2.0"}, requires); diff != "" {
		t.Errorf("app's requirements (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var replaced []string
	for _, r := range work.Replace {
		replaced = append(replaced, r.Old.String()+" => "+r.New.Path)
	}
	if diff := cmp.Diff([]string{"example.com/kit@v0.2.0 => ./", "example.com/kit/lib@v0.2.0 => ./lib"}, replaced); diff != "" {
		t.Errorf("go.work's replacements (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(data), "// The modules require one another at the last release.\n") {
		t.Errorf("go.work lost its comment:\n%s", data)
	}
	sum, err := os.ReadFile(filepath.Join(repo, "app", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sum), "v0.1.0") {
		t.Errorf("app's go.sum keeps the sums of v0.1.0:\n%s", sum)
	}
	buildsFromAProxy(t, repo, "v0.2.0")
}

func TestReleaseRefusesATreeThatIsNotReady(t *testing.T) {
	for name, tc := range map[string]struct {
		reason  string
		version string
		// change makes the tree not ready; it returns the TESTED commit.
		change func(t *testing.T, repo string) string
		tests  error
		want   []string
	}{
		"NotAVersion": {
			reason:  "VERSION is a semantic version with its v.",
			version: "0.2",
			want:    []string{`VERSION="0.2" is not a release version`},
		},
		"PseudoVersion": {
			reason:  "A pseudo-version names a commit, not a release.",
			version: "v0.0.0-20260101000000-abcdefabcdef",
			want:    []string{"is not a release version"},
		},
		"UncommittedChange": {
			reason: "A release is of a commit, which must be all there is.",
			change: func(t *testing.T, repo string) string {
				write(t, repo, "lib/notes.txt", "not committed\n")
				return "HEAD"
			},
			want: []string{"changes that are not committed", "lib/notes.txt"},
		},
		"NoChangelogSection": {
			reason:  "CHANGELOG.md says what the release changed.",
			version: "v0.2.0",
			want:    []string{`CHANGELOG.md has no section for v0.2.0`, `"## [0.2.0] - YYYY-MM-DD"`},
		},
		"ChangelogSectionWithoutDate": {
			reason: "A section of CHANGELOG.md has its date.",
			change: func(t *testing.T, repo string) string {
				write(t, repo, "CHANGELOG.md", "# Changelog\n\n## [0.1.0]\n\n- The first release.\n")
				return commit(t, repo, "no date")
			},
			want: []string{`heading "## [0.1.0]" is not`},
		},
		"EmptyChangelogSection": {
			reason: "A section of CHANGELOG.md says something.",
			change: func(t *testing.T, repo string) string {
				write(t, repo, "CHANGELOG.md", "# Changelog\n\n## [0.1.0] - 2026-01-31\n\n## [0.0.9] - 2026-01-01\n\n- Before.\n")
				return commit(t, repo, "empty section")
			},
			want: []string{"section for v0.1.0 is empty"},
		},
		"TagExists": {
			reason: "A module's tag is never moved.",
			change: func(t *testing.T, repo string) string {
				gitT(t, repo, "tag", "lib/v0.1.0")
				return "HEAD"
			},
			want: []string{"tag lib/v0.1.0 exists already"},
		},
		"NotAfterTheLatestRelease": {
			reason: "Versions only go up.",
			change: func(t *testing.T, repo string) string {
				gitT(t, repo, "tag", "v0.3.0")
				return "HEAD"
			},
			want: []string{"VERSION=v0.1.0 does not come after v0.3.0"},
		},
		"ReplaceInAGoMod": {
			reason: "A released go.mod replaces nothing: its users would not see the replacement.",
			change: func(t *testing.T, repo string) string {
				write(t, repo, "lib/go.mod", "module example.com/kit/lib\n\ngo 1.26.0\n\nrequire example.com/kit v0.1.0\n\nreplace example.com/kit => ../\n")
				return commit(t, repo, "a replacement")
			},
			want: []string{"lib/go.mod replaces example.com/kit"},
		},
		"AnotherCommitTested": {
			reason: "TESTED vouches for the commit released, and no other.",
			change: func(t *testing.T, repo string) string {
				tested := gitT(t, repo, "rev-parse", "HEAD")
				write(t, repo, "kit.go", "package kit\n\n// Name is the kit's name.\nconst Name = \"kit 2\"\n")
				commit(t, repo, "a change after the tests")
				return tested
			},
			want: []string{"but the release is of"},
		},
		"TestsFail": {
			reason: "Without TESTED, the tests run and must pass.",
			change: func(*testing.T, string) string { return "" },
			tests:  errors.New("make test: exit status 2"),
			want:   []string{"make test: exit status 2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			repo := kit(t)
			tested := "HEAD"
			if tc.change != nil {
				tested = tc.change(t, repo)
			}
			if tc.version == "" {
				tc.version = "v0.1.0"
			}
			before := []string{gitT(t, repo, "rev-parse", "HEAD"), gitT(t, repo, "tag", "--list"), gitT(t, repo, "status", "--porcelain")}
			r, _ := newRelease(repo, tc.version, tested)
			if tc.tests != nil {
				r.test = func(context.Context) error { return tc.tests }
			}
			err := r.run(t.Context())
			if err == nil {
				t.Fatalf("%s\nrelease succeeded", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not say %q", tc.reason, err, w)
				}
			}
			after := []string{gitT(t, repo, "rev-parse", "HEAD"), gitT(t, repo, "tag", "--list"), gitT(t, repo, "status", "--porcelain")}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("%s\nthe refused release changed the repository (-before +after):\n%s", tc.reason, diff)
			}
		})
	}
}
