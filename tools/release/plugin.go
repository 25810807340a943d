package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// distDir is the directory of the repository where make release writes
// the plugin's archives, their SHA256SUMS and krew's manifest. It is
// ignored by git, and emptied at each release.
const distDir = "dist"

// A plugin is a kubectl plugin that make release builds for each platform
// from the release commit and publishes for krew: an archive per
// platform, holding the binary and the repository's LICENSE, the archives'
// SHA256SUMS, and krew's manifest, which names each archive by its URL and
// its SHA-256.
type plugin struct {
	// module is the directory of the released module that holds the
	// plugin, slash-separated; pkg is its main package there, such as
	// "./kubectl-fsm".
	module, pkg string
	// binary is the executable's name, without the .exe of Windows.
	binary string
	// name is the plugin's name for krew (kubectl krew install NAME), and
	// its manifest's file name, NAME.yaml.
	name string
	// homepage, shortDescription, description and caveats are what krew
	// shows of the plugin.
	homepage, shortDescription, description, caveats string
	// platforms are those the plugin is built for.
	platforms []platform
	// downloadURL is the URL of the directory that a release's archives
	// are downloaded from once published; {version} in it stands for the
	// version.
	downloadURL string
}

// A platform is an operating system and an architecture, as GOOS and
// GOARCH name them; krew names them the same.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// executable is the binary's file name on the platform.
func (p *plugin) executable(on platform) string {
	if on.os == "windows" {
		return p.binary + ".exe"
	}
	return p.binary
}

// archiveName is the file name of the platform's archive of the version.
func (p *plugin) archiveName(version string, on platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", p.binary, version, on.os, on.arch)
}

// archiveURL is where the archive of the version is downloaded from.
func (p *plugin) archiveURL(version, archive string) (string, error) {
	base := strings.ReplaceAll(p.downloadURL, "{version}", version)
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("-download-url %q: %w", p.downloadURL, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return "", fmt.Errorf("-download-url %q is not an http or https URL, which krew downloads from", p.downloadURL)
	}
	return u.JoinPath(archive).String(), nil
}

// checkPlugin lists what keeps the plugin from being built and published
// from the tree.
func (r *release) checkPlugin(mods []module) []error {
	p := r.plugin
	var problems []error
	if !slices.ContainsFunc(mods, func(m module) bool { return m.dir == p.module }) {
		problems = append(problems, fmt.Errorf("the plugin's module, in %q, is not a module of go.work", p.module))
	}
	if info, err := os.Stat(filepath.Join(r.repo, filepath.FromSlash(p.module), filepath.FromSlash(p.pkg))); err != nil || !info.IsDir() {
		problems = append(problems, fmt.Errorf("the plugin's package %s is not a directory of module %q", p.pkg, p.module))
	}
	if _, err := os.Stat(filepath.Join(r.repo, "LICENSE")); err != nil {
		problems = append(problems, errors.New("the repository has no LICENSE, which each archive of the plugin holds"))
	}
	if _, err := git(r.repo, "check-ignore", "--quiet", distDir+"/"); err != nil {
		problems = append(problems, fmt.Errorf("%s/ is not ignored by git: make release writes the plugin's archives there, and the tree must stay clean", distDir))
	}
	if _, err := p.archiveURL("v0.0.0", "archive"); err != nil {
		problems = append(problems, err)
	}
	return problems
}

// dist builds the plugin from the release commit for each platform, and
// writes into dist/ its archives, their SHA256SUMS and krew's manifest.
func (r *release) dist(ctx context.Context, mods []module, commit string) error {
	p := r.plugin
	dist := filepath.Join(r.repo, distDir)
	if err := os.RemoveAll(dist); err != nil {
		return err
	}
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "kfsm-release-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	env, err := r.newBuildEnv(ctx, tmp, mods)
	if err != nil {
		return err
	}
	when, err := git(r.repo, "log", "-1", "--format=%ct", commit)
	if err != nil {
		return err
	}
	seconds, err := strconv.ParseInt(when, 10, 64)
	if err != nil {
		return fmt.Errorf("the time of commit %s: %w", commit, err)
	}
	root := mods[slices.IndexFunc(mods, func(m module) bool { return m.dir == "" })]
	var archives []archive
	for _, on := range p.platforms {
		bin := filepath.Join(tmp, on.os+"_"+on.arch, p.executable(on))
		if err := r.build(ctx, env, on, bin); err != nil {
			return err
		}
		if err := builtAt(bin, root.path, r.version, on); err != nil {
			return err
		}
		a := archive{platform: on, name: p.archiveName(r.version, on)}
		a.sha256, err = writeArchive(filepath.Join(dist, a.name), time.Unix(seconds, 0), []archiveFile{
			{name: p.executable(on), path: bin, mode: 0o755},
			{name: "LICENSE", path: filepath.Join(r.repo, "LICENSE"), mode: 0o644},
		})
		if err != nil {
			return err
		}
		archives = append(archives, a)
	}
	manifest, err := krewManifest(p, r.version, archives)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dist, p.name+".yaml"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), sha256Sums(archives), 0o644); err != nil {
		return err
	}
	first, err := p.archiveURL(r.version, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "make release: built %s %s for %d platforms into %s/. Publish all of %s/ at %s, then propose %s/%s.yaml to krew's index.\n",
		p.binary, r.version, len(archives), distDir, distDir, first, distDir, p.name)
	return nil
}

// build builds the plugin for the platform into bin from its module in
// the release commit, outside the workspace, as a static binary with no
// file path of this machine in it. The modules it requires come at the
// version from proxy, a module proxy on disk that serves their tags, into
// a module cache of the build's own, and are checked against the release
// commit's go.sum: the go command records them at the version, as in a
// user's go install of the release. (The workspace would record them as
// (devel), and a replace by a directory, that directory.) Every other
// module comes from the machine's module cache, or else from its
// GOPROXY.
func (r *release) build(ctx context.Context, env buildEnv, on platform, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, r.plugin.pkg)
	cmd.Dir = filepath.Join(r.repo, filepath.FromSlash(r.plugin.module))
	proxies := []string{"file://" + filepath.ToSlash(env.proxy), "file://" + filepath.ToSlash(filepath.Join(env.goModCache, "cache", "download"))}
	if env.goProxy != "" {
		proxies = append(proxies, env.goProxy)
	}
	cmd.Env = append(os.Environ(),
		"GOWORK=off", "GOOS="+on.os, "GOARCH="+on.arch, "CGO_ENABLED=0",
		"GOPROXY="+strings.Join(proxies, ","),
		"GOMODCACHE="+env.modCache, "GOPRIVATE=", "GONOPROXY=", "GONOSUMDB=",
		// The same flags whatever the machine's: the archives depend on
		// the release alone.
		"GOFLAGS=-mod=readonly -modcacherw -buildvcs=false",
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of %s for %s: %w\n%s", r.plugin.binary, on, err, out)
	}
	return nil
}

// buildEnv is where build finds the modules.
type buildEnv struct {
	// proxy is the module proxy on disk that serves the release's tags;
	// modCache the build's module cache.
	proxy, modCache string
	// goModCache and goProxy are the machine's GOMODCACHE and GOPROXY.
	goModCache, goProxy string
}

// newBuildEnv writes into dir the module proxy that serves the release's
// tags, and reads the machine's module cache and proxy.
func (r *release) newBuildEnv(ctx context.Context, dir string, mods []module) (buildEnv, error) {
	env := buildEnv{proxy: filepath.Join(dir, "proxy"), modCache: filepath.Join(dir, "mod")}
	if err := writeProxy(env.proxy, r.repo, mods, r.version); err != nil {
		return env, err
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return env, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return env, fmt.Errorf("go env GOMODCACHE GOPROXY printed %q", out)
	}
	env.goModCache, env.goProxy = lines[0], lines[1]
	return env, nil
}

// builtAt checks that the binary records the module root at the version,
// which is what the plugin's version command prints, and that it is built
// for the platform.
func builtAt(bin, root, version string, on platform) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, d := range info.Deps {
		if d.Path == root {
			got[root] = d.Version
		}
	}
	for _, s := range info.Settings {
		got[s.Key] = s.Value
	}
	want := map[string]string{root: version, "GOOS": on.os, "GOARCH": on.arch}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("the plugin built for %s records %s as %q, not %q", on, k, got[k], v)
		}
	}
	return nil
}

// An archive is the plugin's archive for a platform.
type archive struct {
	platform
	// name is its file name; sha256 the SHA-256 of its content, in hex.
	name, sha256 string
}

// An archiveFile is a file to put in an archive: its name there, the
// file it is read from and its mode.
type archiveFile struct {
	name, path string
	mode       int64
}

// writeArchive writes the files into a gzipped tar at name and returns
// the SHA-256 of what it wrote. The archive depends on nothing but the
// files' content and modtime: the same release makes the same archives.
func writeArchive(name string, modtime time.Time, files []archiveFile) (sum string, err error) {
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	defer func() {
		if closeErr := f.Close(); err == nil {
			err = closeErr
		}
	}()
	h := sha256.New()
	// gzip's default level: its best makes archives 1% smaller in more
	// than twice the time.
	zw := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(zw)
	for _, file := range files {
		if err := addFile(tw, file, modtime); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func addFile(tw *tar.Writer, file archiveFile, modtime time.Time) error {
	src, err := os.Open(file.path)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: file.name, Mode: file.mode, Size: info.Size(), ModTime: modtime, Format: tar.FormatUSTAR,
	}); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// sha256Sums is the SHA256SUMS file of the archives, as sha256sum writes
// it and sha256sum --check reads it.
func sha256Sums(archives []archive) []byte {
	var b strings.Builder
	for _, a := range archives {
		fmt.Fprintf(&b, "%s  %s\n", a.sha256, a.name)
	}
	return []byte(b.String())
}
