// Package buildinfo says which kfsm a program was built with. It imports
// only the standard library, so that a small command such as kfsm-init
// can ask without compiling package fsm and its Kubernetes libraries;
// importing it is also what puts the kfsm module in the program's build
// information.
package buildinfo

import "runtime/debug"

// Module is the module path of kfsm.
const Module = "github.com/kfsm/kfsm"

// Version is the version of the kfsm module built into this binary, as Go
// records it: a tag such as v0.3.0, a pseudo-version, or "(devel)" when
// the binary was built inside kfsm's own source tree.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if info.Main.Path == Module {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == Module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}
