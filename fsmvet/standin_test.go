package fsmvet_test

import (
	"go/types"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/packages"
)

// The tests analyse code written against a stand-in for package fsm,
// which compiles without Kubernetes; it must declare what it declares with
// the real package's signatures, so that the tests exercise real calls.
func TestStandInMatchesFsm(t *testing.T) {
	real := load(t, &packages.Config{Mode: packages.NeedTypes | packages.NeedName}, "github.com/kfsm/kfsm/fsm")
	gopath, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	standIn := load(t, &packages.Config{
		Mode: packages.NeedTypes | packages.NeedName,
		Dir:  gopath,
		Env:  append(os.Environ(), "GOPATH="+gopath, "GO111MODULE=off", "GOWORK=off", "GOFLAGS="),
	}, "github.com/kfsm/kfsm/fsm")

	qualifier := func(p *types.Package) string { return p.Name() }
	str := func(t types.Type) string { return types.TypeString(t, qualifier) }
	for _, name := range standIn.Scope().Names() {
		obj := standIn.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		want := real.Scope().Lookup(name)
		if want == nil {
			t.Errorf("the stand-in declares %s, which package fsm does not", name)
			continue
		}
		switch obj := obj.(type) {
		case *types.Func, *types.Const:
			if got, want := types.ObjectString(obj, qualifier), types.ObjectString(want, qualifier); got != want {
				t.Errorf("the stand-in declares\n\t%s\npackage fsm declares\n\t%s", got, want)
			}
		case *types.TypeName:
			if name == "Object" {
				continue // client.Object and FSMStatus in the real package
			}
			if got, want := str(obj.Type().Underlying()), str(want.Type().Underlying()); got != want && !isStruct(obj.Type()) {
				t.Errorf("type %s is %s in the stand-in and %s in package fsm", name, got, want)
			}
			if isStruct(obj.Type()) {
				sameFields(t, name, obj.Type(), want.Type(), str)
			}
			sameMethods(t, name, obj.Type(), want.Type(), str)
		}
	}
}

func load(t *testing.T, cfg *packages.Config, path string) *types.Package {
	t.Helper()
	pkgs, err := packages.Load(cfg, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		t.Fatalf("loading %s: %v", path, pkgs[0].Errors)
	}
	return pkgs[0].Types
}

func isStruct(t types.Type) bool {
	_, ok := t.Underlying().(*types.Struct)
	return ok
}

// sameFields checks that the stand-in's exported fields are the real ones.
func sameFields(t *testing.T, name string, got, want types.Type, str func(types.Type) string) {
	t.Helper()
	for i, s := 0, got.Underlying().(*types.Struct); i < s.NumFields(); i++ {
		f := s.Field(i)
		if !f.Exported() {
			continue
		}
		obj, _, _ := types.LookupFieldOrMethod(want, true, nil, f.Name())
		if obj == nil || str(obj.Type()) != str(f.Type()) {
			t.Errorf("field %s.%s is %s in the stand-in, and not in package fsm", name, f.Name(), str(f.Type()))
		}
	}
}

// sameMethods checks that the stand-in's methods are the real ones.
func sameMethods(t *testing.T, name string, got, want types.Type, str func(types.Type) string) {
	t.Helper()
	ms := types.NewMethodSet(types.NewPointer(got))
	for i := range ms.Len() {
		m := ms.At(i).Obj()
		obj, _, _ := types.LookupFieldOrMethod(want, true, nil, m.Name())
		if obj == nil || str(obj.Type()) != str(m.Type()) {
			t.Errorf("method %s.%s is %s in the stand-in, and not in package fsm", name, m.Name(), str(m.Type()))
		}
	}
}
