package scaffold

import (
	"bytes"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// written is a project that Write wrote, with its first kind, Widget.
func written(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := widget(t).Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A second kind gets files of its own and a line in each file that lists
// the kinds, beside the first kind's, which stay.
func TestCreateAPIAddsAKindBesideTheFirst(t *testing.T) {
	dir := written(t)
	files, err := API{Kind: "Gadget"}.Files(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PROJECT",
		"api/v1alpha1/gadget_types.go",
		"api/v1alpha1/groupversion_info.go",
		"api/v1alpha1/zz_generated.deepcopy.go",
		"cmd/main.go",
		"config/crd/kustomization.yaml",
		"config/rbac/gadget_editor_role.yaml",
		"config/rbac/gadget_viewer_role.yaml",
		"config/rbac/kustomization.yaml",
		"config/samples/gadget.yaml",
		"hack/generate/main.go",
		"internal/controller/gadget.go",
		"internal/controller/gadget.graph.lock.json",
		"internal/controller/gadget_test.go",
		"internal/controller/suite_test.go",
	}
	if diff := cmp.Diff(want, slices.Sorted(maps.Keys(files))); diff != "" {
		t.Fatalf("files written (-want +got):\n%s", diff)
	}
	for name, wants := range map[string][]string{
		"PROJECT":                               {"  - kind: Widget\n    version: v1alpha1\n  - kind: Gadget\n    version: v1alpha1\n"},
		"api/v1alpha1/groupversion_info.go":     {"\t&Widget{}, &WidgetList{},\n\t&Gadget{}, &GadgetList{},\n\t// +kfsm:scaffold:types\n"},
		"api/v1alpha1/zz_generated.deepcopy.go": {"func (in *Widget) DeepCopyInto(", "func (in *Gadget) DeepCopyInto(", "func (in *GadgetList) DeepCopyObject() runtime.Object {"},
		"cmd/main.go": {
			"(&controller.WidgetHandlers{}).Machine()); err != nil {\n\t\treturn webhooks, err\n\t}\n" +
				"\tif err := setup(mgr, o, shards, &webhooks, v1alpha1.GroupVersion.WithResource(\"gadgets\"), (&controller.GadgetHandlers{}).Machine()); err != nil {\n" +
				"\t\treturn webhooks, err\n\t}\n\t// +kfsm:scaffold:machines\n",
			"\t\tv1alpha1.AddToScheme,\n\t\t// +kfsm:scaffold:schemes\n",
		},
		"internal/controller/suite_test.go": {"\t\t\tv1alpha1.AddToScheme,\n\t\t\t// +kfsm:scaffold:schemes\n"},
		"hack/generate/main.go":             {`kindOf((&controller.GadgetHandlers{}).Machine(), v1alpha1.GroupVersion.WithResource("gadgets")),`},
		"config/crd/kustomization.yaml":     {"  - bases/example.com_widgets.yaml\n  - bases/example.com_gadgets.yaml\n"},
		"config/rbac/kustomization.yaml":    {"  - widget_viewer_role.yaml\n  - gadget_editor_role.yaml\n  - gadget_viewer_role.yaml\n"},
		"internal/controller/gadget.go":     {"type GadgetHandlers struct{}", "GadgetPending fsm.State = \"Pending\"", "resourceNames=gadgets.example.com,verbs=get\n"},
	} {
		for _, w := range wants {
			if !strings.Contains(string(files[name]), w) {
				t.Errorf("%s lacks %q:\n%s", name, w, files[name])
			}
		}
	}
	// A version's package imports it once, and registers it once.
	for _, name := range []string{"cmd/main.go", "hack/generate/main.go", "internal/controller/suite_test.go"} {
		if n := strings.Count(string(files[name]), `"example.com/widget/api/v1alpha1"`); n != 1 {
			t.Errorf("%s imports the API package %d times", name, n)
		}
	}
	checkGo(t, files)
}

// A kind in an API version of its own gets the version's package.
func TestCreateAPIInANewVersionWritesItsPackage(t *testing.T) {
	files, err := API{Kind: "Gadget", Version: "v1"}.Files(os.DirFS(written(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api/v1/groupversion_info.go", "api/v1/zz_generated.deepcopy.go", "api/v1/gadget_types.go"} {
		if _, ok := files[name]; !ok {
			t.Errorf("no %s among %v", name, slices.Sorted(maps.Keys(files)))
		}
	}
	if _, ok := files["api/v1alpha1/zz_generated.deepcopy.go"]; ok {
		t.Error("the first version's deepcopy code changes")
	}
	for _, name := range []string{"cmd/main.go", "hack/generate/main.go", "internal/controller/suite_test.go"} {
		for _, w := range []string{`"example.com/widget/api/v1"`, `"example.com/widget/api/v1alpha1"`} {
			if !bytes.Contains(files[name], []byte(w)) {
				t.Errorf("%s does not import %s", name, w)
			}
		}
	}
	if !bytes.Contains(files["cmd/main.go"], []byte("\t\tv1alpha1.AddToScheme,\n\t\tv1.AddToScheme,\n")) {
		t.Errorf("cmd/main.go does not add both versions to its scheme:\n%s", files["cmd/main.go"])
	}
	checkGo(t, files)
}

// checkGo checks that the Go files parse and are gofmt'ed.
func checkGo(t *testing.T, files map[string][]byte) {
	t.Helper()
	for name, src := range files {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		if _, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments); err != nil {
			t.Errorf("%s does not parse: %v", name, err)
		}
	}
}

func TestCreateAPIRefusesAndChangesNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		reason string
		api    API
		change func(t *testing.T, dir string)
		want   []string
	}{
		"NoProject": {
			reason: "create api works in a project that kfsm init wrote.",
			api:    API{Kind: "Gadget"},
			change: func(t *testing.T, dir string) { remove(t, dir, "PROJECT") },
			want:   []string{"no PROJECT here", "kfsm init"},
		},
		"KindTaken": {
			reason: "A kind is added once.",
			api:    API{Kind: "Widget"},
			want:   []string{"kind Widget is the project's already"},
		},
		"BadKindAndVersion": {
			reason: "Every problem is listed at once.",
			api:    API{Kind: "gadget", Version: "2"},
			want:   []string{`kind "gadget" is not a Go identifier`, `version "2" is not a Kubernetes API version`},
		},
		"MarkerGone": {
			reason: "A file that lists the kinds keeps its marker.",
			api:    API{Kind: "Gadget"},
			change: func(t *testing.T, dir string) {
				file := filepath.Join(dir, "cmd", "main.go")
				src, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, bytes.Replace(src, []byte("// +kfsm:scaffold:machines"), nil, 1), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"cmd/main.go", `no line "// +kfsm:scaffold:machines"`},
		},
		"FileInTheWay": {
			reason: "A file of the new kind that exists is not overwritten.",
			api:    API{Kind: "Gadget"},
			change: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "internal", "controller", "gadget.go"), []byte("package controller\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"gadget.go exists already"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := written(t)
			if tc.change != nil {
				tc.change(t, dir)
			}
			before := snapshot(t, dir)
			var out, log strings.Builder
			err := tc.api.Create(t.Context(), dir, &out, &log)
			if err == nil {
				t.Fatalf("%s\nCreate succeeded", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not say %q", tc.reason, err, w)
				}
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Errorf("%s\nCreate changed the project (-before +after):\n%s", tc.reason, diff)
			}
		})
	}
}

func remove(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// snapshot is the content of every file under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range tree(t, dir) {
		src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(src)
	}
	return out
}
