package scaffold

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"
)

// versionFiles are rendered once per API version: its package.
var versionFiles = []file{
	{"api/groupversion_info.go.tmpl", "api/{{.Version}}/groupversion_info.go"},
	{"api/zz_generated.deepcopy.go.tmpl", "api/{{.Version}}/zz_generated.deepcopy.go"},
}

// kindFiles are rendered once per kind. The machine's lock is marked
// unreleased, with no graph until make generate writes the sample's: the
// project replaces the sample with its own machine, and no release has
// shipped it.
var kindFiles = []file{
	{"api/types.go.tmpl", "api/{{.Version}}/{{.Lower}}_types.go"},
	{"controller/machine.go.tmpl", "internal/controller/{{.Lower}}.go"},
	{"controller/machine_test.go.tmpl", "internal/controller/{{.Lower}}_test.go"},
	{"controller/graph.lock.json.tmpl", "internal/controller/{{.Lower}}.graph.lock.json"},
	{"config/rbac/editor_role.yaml.tmpl", "config/rbac/{{.Lower}}_editor_role.yaml"},
	{"config/rbac/viewer_role.yaml.tmpl", "config/rbac/{{.Lower}}_viewer_role.yaml"},
	{"config/sample.yaml.tmpl", "config/samples/{{.Lower}}.yaml"},
}

// deepcopyFile holds a kind's deepcopy functions, which go at the end of
// its version's zz_generated.deepcopy.go until controller-gen writes it.
const deepcopyFile = "api/deepcopy.go.tmpl"

// insert is text that a kind adds to a file of the project, before a
// marker line, with the marker's indentation. Text that the file holds
// already is not added again: a version's import is added with its first
// kind only.
type insert struct{ path, marker, text string }

// The marker lines of the files that list the project's kinds.
var inserts = []insert{
	{"api/{{.Version}}/groupversion_info.go", "// +kfsm:scaffold:types", "&{{.Kind}}{}, &{{.Kind}}List{},"},
	{"cmd/main.go", "// +kfsm:scaffold:imports", "{{.APIImport}}"},
	{"cmd/main.go", "// +kfsm:scaffold:schemes", "{{.Version}}.AddToScheme,"},
	{"cmd/main.go", "// +kfsm:scaffold:machines", "if err := setup(mgr, o, shards, &webhooks, {{.Version}}.GroupVersion.WithResource(\"{{.Plural}}\"), (&controller.{{.Kind}}Handlers{}).Machine()); err != nil {\n\treturn webhooks, err\n}"},
	{"internal/controller/suite_test.go", "// +kfsm:scaffold:imports", "{{.APIImport}}"},
	{"internal/controller/suite_test.go", "// +kfsm:scaffold:schemes", "{{.Version}}.AddToScheme,"},
	{"hack/generate/main.go", "// +kfsm:scaffold:imports", "{{.APIImport}}"},
	{"hack/generate/main.go", "// +kfsm:scaffold:kinds", `kindOf((&controller.{{.Kind}}Handlers{}).Machine(), {{.Version}}.GroupVersion.WithResource("{{.Plural}}")),`},
	{"config/crd/kustomization.yaml", "# +kfsm:scaffold:crds", "- bases/{{.Group}}_{{.Plural}}.yaml"},
	{"config/rbac/kustomization.yaml", "# +kfsm:scaffold:roles", "- {{.Lower}}_editor_role.yaml\n- {{.Lower}}_viewer_role.yaml"},
}

// addKind adds d's kind to the project's files, by slash-separated path:
// its version's package if the version is new, the kind's own files, its
// deepcopy functions, its lines in the files that list the kinds, and its
// entry in PROJECT. The files that it adds must be absent and those that
// it changes present; the kind must be new.
func addKind(files map[string][]byte, d data) error {
	rec, err := parseRecord(files[recordFile])
	if err != nil {
		return err
	}
	var add []file
	if !rec.hasVersion(d.Version) {
		add = append(add, versionFiles...)
	}
	for _, f := range append(add, kindFiles...) {
		name, content, err := renderFile(f, d)
		if err != nil {
			return err
		}
		if _, ok := files[name]; ok {
			return fmt.Errorf("%s exists already", name)
		}
		files[name] = content
	}

	_, deepcopy, err := renderFile(file{tmpl: deepcopyFile}, d)
	if err != nil {
		return err
	}
	name := "api/" + d.Version + "/zz_generated.deepcopy.go"
	if files[name] == nil {
		return fmt.Errorf("%s is missing", name)
	}
	files[name] = append(files[name], deepcopy...)

	for _, in := range inserts {
		name, err := render(in.path, []byte(in.path), d)
		if err != nil {
			return err
		}
		text, err := render(in.path, []byte(in.text), d)
		if err != nil {
			return err
		}
		content, ok := files[string(name)]
		if !ok {
			return fmt.Errorf("%s is missing", name)
		}
		if content, err = insertBefore(content, in.marker, text); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		files[string(name)] = content
	}
	for name, content := range files {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		formatted, err := format.Source(content)
		if err != nil {
			return fmt.Errorf("%s, with the kind %s, is not Go: %w", name, d.Kind, err)
		}
		files[name] = formatted
	}

	rec.Kinds = append(rec.Kinds, recordKind{Kind: d.Kind, Version: d.Version})
	files[recordFile] = rec.marshal()
	return nil
}

// insertBefore puts text before the line that holds marker, each of its
// lines with the marker's indentation, unless content holds text already.
func insertBefore(content []byte, marker string, text []byte) ([]byte, error) {
	if bytes.Contains(content, text) {
		return content, nil
	}
	at := bytes.Index(content, []byte(marker))
	if at < 0 {
		return nil, fmt.Errorf("no line %q, where kfsm adds a kind: put it back where the kinds are listed", marker)
	}
	start := bytes.LastIndexByte(content[:at], '\n') + 1
	indent := content[start:at]
	if len(bytes.TrimLeft(indent, " \t")) > 0 {
		return nil, fmt.Errorf("%q is not alone on its line", marker)
	}
	var b bytes.Buffer
	b.Write(content[:start])
	for line := range strings.SplitSeq(string(text), "\n") {
		b.Write(indent)
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.Write(content[start:])
	return b.Bytes(), nil
}
