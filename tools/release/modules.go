package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"golang.org/x/mod/modfile"
)

// A module is one of kfsm's released modules: the modules of the
// workspace, go.work. (The modules under tools/ are not in it, and are not
// released.)
type module struct {
	// path is the module path, dir its directory in the repository,
	// slash-separated, "" for the root.
	path, dir string
	// requires are the paths of the other released modules that its go.mod
	// requires.
	requires []string
}

// tag is the name of the module's tag at version: the version for the
// root, and prefixed by the directory for a module in a subdirectory, as
// the go command looks them up.
func (m module) tag(version string) string {
	if m.dir == "" {
		return version
	}
	return m.dir + "/" + version
}

// file is the path of a file of the module, relative to the repository.
func (m module) file(name string) string {
	return path.Join(m.dir, name)
}

// workspaceModules reads the modules of the workspace in repo, each after
// the modules it requires.
func workspaceModules(repo string) ([]module, error) {
	data, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	var mods []module
	var files []*modfile.File
	for _, use := range work.Use {
		dir := path.Clean(use.Path)
		if dir == "." {
			dir = ""
		}
		f, err := readGoMod(repo, module{dir: dir})
		if err != nil {
			return nil, err
		}
		mods = append(mods, module{path: f.Module.Mod.Path, dir: dir})
		files = append(files, f)
	}
	released := func(p string) bool { return slices.ContainsFunc(mods, func(m module) bool { return m.path == p }) }
	var problems []error
	for i, f := range files {
		for _, r := range f.Require {
			if released(r.Mod.Path) {
				mods[i].requires = append(mods[i].requires, r.Mod.Path)
			}
		}
		if len(f.Replace) > 0 {
			problems = append(problems, fmt.Errorf("%s replaces %s: a released go.mod replaces nothing (go.work joins the modules for development)", mods[i].file("go.mod"), f.Replace[0].Old.Path))
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	root := slices.IndexFunc(mods, func(m module) bool { return m.dir == "" })
	if root < 0 {
		return nil, errors.New("go.work does not use the repository's root module")
	}
	for _, m := range mods {
		if want := path.Join(mods[root].path, m.dir); m.path != want {
			problems = append(problems, fmt.Errorf("module %s is in directory %q: its path must be %s, for the go command to find it at tags %s", m.path, m.dir, want, m.tag("vX.Y.Z")))
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return inOrder(mods)
}

// inOrder sorts the modules so that each comes after those it requires.
func inOrder(mods []module) ([]module, error) {
	var out []module
	placed := func(p string) bool { return slices.ContainsFunc(out, func(m module) bool { return m.path == p }) }
	for len(mods) > 0 {
		var rest []module
		for _, m := range mods {
			if !slices.ContainsFunc(m.requires, func(r string) bool { return !placed(r) }) {
				out = append(out, m)
			} else {
				rest = append(rest, m)
			}
		}
		if len(rest) == len(mods) {
			return nil, fmt.Errorf("the modules %s require one another in a cycle", paths(rest))
		}
		mods = rest
	}
	return out, nil
}

func paths(mods []module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.path)
	}
	return out
}

func readGoMod(repo string, m module) (*modfile.File, error) {
	name := m.file("go.mod")
	data, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(name)))
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s has no module line", name)
	}
	return f, nil
}
