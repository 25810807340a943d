// Package setupenvtest finds and downloads kube-apiserver, etcd and
// kubectl as controller-runtime's setup-envtest does, in its layout, so
// that the two share them.
//
// setup-envtest keeps a store: a directory whose k8s folder holds one
// folder per version and platform, such as k8s/1.36.3-linux-amd64, with
// the three binaries. It downloads them from release archives that an
// index names: a YAML document that maps each Kubernetes version to its
// archives, one per platform, each with its address and SHA-512.
//
// The package reads the index with net/http and sigs.k8s.io/yaml rather
// than setup-envtest's own packages, whose module would add spf13/afero
// and its own requirements to every module that imports package cluster.
package setupenvtest

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// DefaultIndexURL is the index that setup-envtest reads.
const DefaultIndexURL = "https://raw.githubusercontent.com/kubernetes-sigs/controller-tools/HEAD/envtest-releases.yaml"

// binaries are the files that a release archive holds.
var binaries = []string{"kube-apiserver", "etcd", "kubectl"}

const (
	indexTimeout   = time.Minute
	archiveTimeout = 15 * time.Minute
	// maxIndex bounds the index read into memory; it is about 100 KiB.
	maxIndex = 16 << 20
)

// DefaultStore returns the directory of setup-envtest's store on this
// system: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest, except on
// macOS (~/Library/Application Support/io.kubebuilder.envtest) and
// Windows (%LocalAppData%\kubebuilder-envtest).
func DefaultStore() (string, error) {
	switch runtime.GOOS {
	case "windows":
		dir := os.Getenv("LocalAppData")
		if dir == "" {
			return "", errors.New("%LocalAppData% is not set")
		}
		return filepath.Join(dir, "kubebuilder-envtest"), nil
	case "darwin", "ios":
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(home, "Library", "Application Support", "io.kubebuilder.envtest"), nil
	}
	if dir := os.Getenv("XDG_DATA_HOME"); dir != "" {
		return filepath.Join(dir, "kubebuilder-envtest"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "share", "kubebuilder-envtest"), nil
}

// Store is a directory laid out as setup-envtest's store.
type Store struct {
	Dir string
}

// Path returns the directory of the binaries of version, such as
// v1.36.3, for this platform.
func (s Store) Path(version string) string {
	return filepath.Join(s.Dir, "k8s", platformName(version))
}

func platformName(version string) string {
	return fmt.Sprintf("%s-%s-%s", strings.TrimPrefix(version, "v"), runtime.GOOS, runtime.GOARCH)
}

// Archive is the release archive of a version's binaries for this
// platform.
type Archive struct {
	// Version is the Kubernetes version, such as v1.36.3.
	Version string
	// URL is where the archive is; SHA512 its digest, in hexadecimal.
	URL, SHA512 string
}

// index is the document at DefaultIndexURL: releases, by version, map
// archive names to archives.
type index struct {
	Releases map[string]map[string]struct {
		Hash     string `json:"hash"`
		SelfLink string `json:"selfLink"`
	} `json:"releases"`
}

// FindArchive reads the index at indexURL and returns the archive of
// version for this platform.
func FindArchive(ctx context.Context, indexURL, version string) (Archive, error) {
	ctx, cancel := context.WithTimeout(ctx, indexTimeout)
	defer cancel()
	body, err := get(ctx, indexURL)
	if err != nil {
		return Archive{}, err
	}
	defer func() { _ = body.Close() }()
	data, err := io.ReadAll(io.LimitReader(body, maxIndex))
	if err != nil {
		return Archive{}, fmt.Errorf("reading %s: %w", indexURL, err)
	}
	var idx index
	if err := yaml.Unmarshal(data, &idx); err != nil {
		return Archive{}, fmt.Errorf("the index %s is not setup-envtest's: %w", indexURL, err)
	}
	release, ok := idx.Releases[version]
	if !ok {
		return Archive{}, fmt.Errorf("the index %s has no release %s", indexURL, version)
	}
	name := "envtest-" + version + "-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"
	a, ok := release[name]
	if !ok {
		return Archive{}, fmt.Errorf("the index %s has no %s in release %s", indexURL, name, version)
	}
	if len(a.Hash) != 2*sha512.Size {
		return Archive{}, fmt.Errorf("the index %s gives no SHA-512 of %s (hash %q)", indexURL, name, a.Hash)
	}
	// The index gives absolute links; a relative one is read as a browser
	// would.
	base, err := url.Parse(indexURL)
	if err != nil {
		return Archive{}, err
	}
	link, err := base.Parse(a.SelfLink)
	if err != nil {
		return Archive{}, fmt.Errorf("the index %s gives %s a bad link: %w", indexURL, name, err)
	}
	return Archive{Version: version, URL: link.String(), SHA512: strings.ToLower(a.Hash)}, nil
}

// Install downloads a, checks it against its SHA-512, and puts its
// binaries in the store at Path(a.Version), which it returns. The
// binaries appear there all at once, and only once they are checked: a
// failed or interrupted download leaves nothing in the store.
func (s Store) Install(ctx context.Context, a Archive) (string, error) {
	dir := s.Path(a.Version)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	// A name that setup-envtest does not take for a version.
	work, err := os.MkdirTemp(filepath.Dir(dir), ".kfsm-download-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(work) }()

	archive := filepath.Join(work, "archive.tar.gz")
	if err := download(ctx, a, archive); err != nil {
		return "", err
	}
	bin := filepath.Join(work, "bin")
	if err := unpack(archive, bin); err != nil {
		return "", fmt.Errorf("unpacking %s: %w", a.URL, err)
	}
	if err := os.Rename(bin, dir); err != nil {
		if missing(dir) == "" {
			return dir, nil // another process installed them first
		}
		if _, statErr := os.Stat(dir); statErr != nil {
			return "", fmt.Errorf("installing the binaries: %w", err)
		}
		return "", fmt.Errorf("setup-envtest's store has %s already, without the binaries: remove it to download them again: %w", dir, err)
	}
	return dir, nil
}

// download writes the archive to file, or fails if its SHA-512 differs.
func download(ctx context.Context, a Archive, file string) error {
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	body, err := get(ctx, a.URL)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	h := sha512.New()
	if _, err := io.Copy(io.MultiWriter(f, h), body); err != nil {
		return fmt.Errorf("downloading %s: %w", a.URL, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != a.SHA512 {
		return fmt.Errorf("%s is not the archive that the index names: its SHA-512 is %s, the index says %s", a.URL, sum, a.SHA512)
	}
	return f.Close()
}

func get(ctx context.Context, u string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return resp.Body, nil
}

// unpack writes the regular files of a .tar.gz archive into dir, by base
// name, as setup-envtest does, and checks that binaries are among them.
func unpack(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("the archive is not a .tar.gz: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("the archive is not a .tar.gz: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Base(h.Name)
		if name == "." || name == ".." || name == "/" {
			return fmt.Errorf("the archive holds a file named %q", h.Name)
		}
		if err := write(filepath.Join(dir, name), fs.FileMode(h.Mode)&0o555, tr); err != nil {
			return err
		}
	}
	if m := missing(dir); m != "" {
		return fmt.Errorf("the archive has no executable %s", m)
	}
	return nil
}

func write(file string, mode fs.FileMode, r io.Reader) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// missing returns the first of binaries that dir has no executable of,
// or "".
func missing(dir string) string {
	for _, name := range binaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return name
		}
	}
	return ""
}
