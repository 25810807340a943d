package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	gomodule "golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// release is one run of make release: it checks the tree, makes the
// release commit and tags it, and pushes nothing.
type release struct {
	// repo is the repository's top directory, an absolute path.
	repo string
	// version is the version to release, such as v0.2.0.
	version string
	// tested is a commit that passed make test in this run, or "".
	tested string
	// test runs the tests, when tested is empty.
	test func(context.Context) error
	// plugin is the kubectl plugin to build and publish for krew, or nil.
	plugin *plugin
	out    io.Writer
}

func (r *release) run(ctx context.Context) error {
	mods, err := r.check()
	if err != nil {
		return err
	}
	if err := r.sync(ctx); err != nil {
		return err
	}
	if err := r.tests(ctx); err != nil {
		return err
	}
	commit, err := r.commit(mods)
	if err != nil {
		return err
	}
	if err := r.tag(mods, commit); err != nil {
		return err
	}
	if r.plugin == nil {
		return nil
	}
	if err := r.dist(ctx, mods, commit); err != nil {
		return fmt.Errorf("the release is tagged, but its kubectl plugin is not built (delete the tags and reset the release commit to start again): %w", err)
	}
	return nil
}

// check lists every problem that makes the tree not ready for the
// release, and returns the modules to release.
func (r *release) check() ([]module, error) {
	var problems []error
	if !isRelease(r.version) {
		problems = append(problems, fmt.Errorf("VERSION=%q is not a release version: vMAJOR.MINOR.PATCH, such as v0.2.0, or with a pre-release, such as v0.2.0-rc.1", r.version))
	}
	mods, err := workspaceModules(r.repo)
	if err != nil {
		problems = append(problems, err)
	}
	if r.plugin != nil {
		problems = append(problems, r.checkPlugin(mods)...)
	}
	status, err := git(r.repo, "status", "--porcelain")
	if err != nil {
		return nil, err
	}
	if status != "" {
		problems = append(problems, fmt.Errorf("the tree has changes that are not committed, and a release is of a commit:\n%s", status))
	}
	if isRelease(r.version) {
		list, err := git(r.repo, "tag", "--list")
		if err != nil {
			return nil, err
		}
		tags := strings.Fields(list)
		for _, m := range mods {
			if slices.Contains(tags, m.tag(r.version)) {
				problems = append(problems, fmt.Errorf("tag %s exists already", m.tag(r.version)))
			}
		}
		if latest := latestRelease(tags); latest != "" && semver.Compare(r.version, latest) <= 0 {
			problems = append(problems, fmt.Errorf("VERSION=%s does not come after %s, the latest release", r.version, latest))
		}
		if err := changelogEntry(r.repo, r.version); err != nil {
			problems = append(problems, err)
		}
	}
	return mods, errors.Join(problems...)
}

// isRelease says whether v is a semantic version that names a release:
// canonical, with no build suffix, and not a pseudo-version.
func isRelease(v string) bool {
	return semver.IsValid(v) && semver.Canonical(v) == v && !gomodule.IsPseudoVersion(v)
}

// latestRelease is the highest release among the root module's tags.
func latestRelease(tags []string) string {
	latest := ""
	for _, t := range tags {
		if isRelease(t) && (latest == "" || semver.Compare(t, latest) > 0) {
			latest = t
		}
	}
	return latest
}

var changelogDate = regexp.MustCompile(`^ - [0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// changelogEntry checks that CHANGELOG.md has a section for version as
// Keep a Changelog writes it, "## [0.2.0] - 2026-01-31", with something
// under it.
func changelogEntry(repo, version string) error {
	data, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	heading := "## [" + strings.TrimPrefix(version, "v") + "]"
	lines := strings.Split(string(data), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, heading) })
	if i < 0 {
		return fmt.Errorf("CHANGELOG.md has no section for %s: add one under the heading %q that says what changed", version, heading+" - YYYY-MM-DD")
	}
	if !changelogDate.MatchString(strings.TrimPrefix(lines[i], heading)) {
		return fmt.Errorf("CHANGELOG.md's heading %q is not %q", lines[i], heading+" - YYYY-MM-DD")
	}
	for _, l := range lines[i+1:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if strings.TrimSpace(l) != "" {
			return nil
		}
	}
	return fmt.Errorf("CHANGELOG.md's section for %s is empty: say what changed", version)
}

// sync runs go work sync, which raises each module's requirements to the
// versions that the workspace builds with, and fails if it changed
// anything: a module whose go.mod lags builds otherwise, or not at all,
// outside the workspace, as its users build it.
func (r *release) sync(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "work", "sync")
	cmd.Dir = r.repo
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(r.repo, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go work sync: %w\n%s", err, out)
	}
	status, err := git(r.repo, "status", "--porcelain")
	if err != nil {
		return err
	}
	if status != "" {
		return fmt.Errorf("go work sync changed the modules' requirements, which lagged those that the workspace builds with; commit what it wrote, then make release again:\n%s", status)
	}
	return nil
}

// tests runs the tests, unless the commit that r.tested names, which
// passed them, is the one to release.
func (r *release) tests(ctx context.Context) error {
	if r.tested == "" {
		fmt.Fprintln(r.out, "make release: running make test (TESTED=<commit> says that this commit passed it already)")
		return r.test(ctx)
	}
	tested, err := git(r.repo, "rev-parse", "--verify", "--quiet", r.tested+"^{commit}")
	if err != nil {
		return fmt.Errorf("TESTED=%s names no commit", r.tested)
	}
	head, err := git(r.repo, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if tested != head {
		return fmt.Errorf("TESTED=%s is commit %s, but the release is of %s: run make release without TESTED to test it", r.tested, tested, head)
	}
	return nil
}

// commit makes the release commit, where every module requires the
// others at the version, with their sums in its go.sum, and go.work
// replaces that version with the checkout's modules. It returns the
// commit.
func (r *release) commit(mods []module) (string, error) {
	files := []string{"go.work"}
	for _, m := range mods {
		if err := r.require(m); err != nil {
			return "", err
		}
		files = append(files, m.file("go.mod"))
	}
	if err := r.replace(mods); err != nil {
		return "", err
	}
	// A module's zip holds its go.sum, so the sums of each come from a tree
	// that holds the go.sum of those it requires, which come before it.
	computed := map[string]sums{}
	for _, m := range mods {
		if len(m.requires) > 0 {
			if err := r.writeSums(m, computed); err != nil {
				return "", err
			}
			files = append(files, m.file("go.sum"))
		}
		if _, err := git(r.repo, append([]string{"add", "--"}, files...)...); err != nil {
			return "", err
		}
		tree, err := git(r.repo, "write-tree")
		if err != nil {
			return "", err
		}
		if computed[m.path], err = checksums(r.repo, tree, m, r.version); err != nil {
			return "", err
		}
	}
	msg := fmt.Sprintf("release %s\n\nkfsm's modules require one another at %s, with the checksums of\nthat version in their go.sum; go.work replaces it with the checkout's\nmodules.\n", r.version, r.version)
	if _, err := git(r.repo, "commit", "--quiet", "--message", msg); err != nil {
		return "", err
	}
	return git(r.repo, "rev-parse", "HEAD")
}

// require sets the module's requirements of the other modules to the
// version.
func (r *release) require(m module) error {
	f, err := readGoMod(r.repo, m)
	if err != nil {
		return err
	}
	for _, p := range m.requires {
		if err := f.AddRequire(p, r.version); err != nil {
			return err
		}
	}
	data, err := f.Format()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.repo, filepath.FromSlash(m.file("go.mod"))), data, 0o644)
}

// replace has go.work replace the version of each module that another
// requires with the module's directory, in place of the version that it
// replaced before.
func (r *release) replace(mods []module) error {
	name := filepath.Join(r.repo, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return err
	}
	for _, m := range mods {
		if !slices.ContainsFunc(mods, func(o module) bool { return slices.Contains(o.requires, m.path) }) {
			continue
		}
		i := slices.IndexFunc(work.Replace, func(rep *modfile.Replace) bool { return rep.Old.Path == m.path && rep.Old.Version != "" })
		if i < 0 {
			if err := work.AddReplace(m.path, r.version, "./"+m.dir, ""); err != nil {
				return err
			}
			continue
		}
		// The line keeps its place and its comments.
		rep := work.Replace[i]
		rep.Syntax.Token[slices.Index(rep.Syntax.Token, rep.Old.Version)] = r.version
	}
	return os.WriteFile(name, modfile.Format(work.Syntax), 0o644)
}

// writeSums writes the sums of the modules that m requires into its
// go.sum, in place of any others of theirs.
func (r *release) writeSums(m module, computed map[string]sums) error {
	name := filepath.Join(r.repo, filepath.FromSlash(m.file("go.sum")))
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	hashes := map[gomodule.Version]string{}
	for l := range strings.Lines(string(data)) {
		f := strings.Fields(l)
		if len(f) != 3 {
			return fmt.Errorf("%s: a line is not a module, a version and a hash: %q", m.file("go.sum"), l)
		}
		hashes[gomodule.Version{Path: f[0], Version: f[1]}] = f[2]
	}
	for v := range hashes {
		if slices.Contains(m.requires, v.Path) {
			delete(hashes, v)
		}
	}
	for _, p := range m.requires {
		s, ok := computed[p]
		if !ok {
			return fmt.Errorf("the sums of %s are not computed before those of %s, which requires it", p, m.path)
		}
		hashes[gomodule.Version{Path: p, Version: r.version}] = s.zip
		hashes[gomodule.Version{Path: p, Version: r.version + "/go.mod"}] = s.mod
	}
	versions := slices.Collect(maps.Keys(hashes))
	gomodule.Sort(versions)
	var b strings.Builder
	for _, v := range versions {
		fmt.Fprintf(&b, "%s %s %s\n", v.Path, v.Version, hashes[v])
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}

// tag makes the annotated tag of each module at the release commit.
func (r *release) tag(mods []module, commit string) error {
	var tags []string
	for _, m := range mods {
		t := m.tag(r.version)
		if _, err := git(r.repo, "tag", "--annotate", "--message", m.path+" "+r.version, t, commit); err != nil {
			return err
		}
		tags = append(tags, t)
	}
	fmt.Fprintf(r.out, "make release: tagged %s at %s; nothing is pushed. To publish the release:\n    git push origin HEAD %s\n",
		strings.Join(tags, ", "), commit, strings.Join(tags, " "))
	return nil
}

// git runs git in the repository dir and returns its output, trimmed.
func git(dir string, args ...string) (string, error) {
	out, err := gitOutput(dir, args...)
	return strings.TrimSpace(string(out)), err
}

// gitOutput runs git in the repository dir and returns its output.
func gitOutput(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}
