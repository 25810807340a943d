package kubectlfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
)

// getOutput is get's -o: kfsm's own table (plain, or wide), custom
// columns, or one of kubectl's printers (json, yaml, name, jsonpath,
// go-template), which print what kubectl get prints for the same objects.
type getOutput struct {
	flags *genericclioptions.PrintFlags
}

func addGetOutput(cmd *cobra.Command) *getOutput {
	o := &getOutput{flags: genericclioptions.NewPrintFlags("")}
	o.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format: wide, %s or custom-columns=HEADER:JSONPATH,... (default: the table)",
		strings.Join(o.flags.AllowedFormats(), ", "))
	return o
}

func (o *getOutput) format() string { return *o.flags.OutputFormat }

// table tells whether -o asks for kfsm's table, and whether wide.
func (o *getOutput) table() (table, wide bool) {
	wide = strings.EqualFold(o.format(), "wide")
	return o.format() == "" || wide, wide
}

// printer is the printer that -o names, or an error that lists the
// formats. It is made before the cluster is read, so that a bad -o fails
// at once.
func (o *getOutput) printer() (printers.ResourcePrinter, error) {
	if spec, ok := strings.CutPrefix(o.format(), "custom-columns="); ok {
		return newColumnsPrinter(spec)
	}
	p, err := o.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		formats := append([]string{"wide"}, o.flags.AllowedFormats()...)
		return nil, fmt.Errorf("-o %s: the formats are %s and custom-columns=HEADER:JSONPATH,... (or none, for the table)",
			o.format(), strings.Join(formats, ", "))
	}
	return p, err
}

// print prints the objects as a v1 List, as kubectl get does, with what
// the cluster wrote made safe for a terminal.
func (o *getOutput) print(w io.Writer, p printers.ResourcePrinter, objs []inspect.Object) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""},
	}}
	// JSON and YAML escape what they quote, and names are plain; a
	// template or columns print values as they are, so each value is
	// made one line first, its control characters escaped.
	format, _, _ := strings.Cut(strings.ToLower(o.format()), "=")
	plain := format == "json" || format == "yaml" || format == "name"
	for _, obj := range objs {
		item := obj.Unstructured.DeepCopy()
		if !plain {
			item.Object = escapeValues(item.Object).(map[string]any)
		}
		list.Items = append(list.Items, *item)
	}
	if format == "yaml" {
		if !o.flags.JSONYamlPrintFlags.ShowManagedFields {
			for i := range list.Items {
				list.Items[i].SetManagedFields(nil)
			}
		}
		return printYAML(w, list)
	}
	var buf bytes.Buffer
	if err := p.PrintObj(list, &buf); err != nil {
		return err
	}
	if format == "json" {
		_, err := w.Write(terminal.JSON(buf.Bytes()))
		return err
	}
	_, err := io.WriteString(w, terminal.Text(buf.String()))
	return err
}

// printYAML prints list as kubectl's YAML printer does, from its JSON,
// but with DEL and the C1 controls written as JSON escapes first: the YAML
// reader that turns JSON into YAML refuses them raw, and what it writes
// escapes them in double quotes.
func printYAML(w io.Writer, list *unstructured.UnstructuredList) error {
	data, err := list.MarshalJSON()
	if err != nil {
		return err
	}
	out, err := yaml.JSONToYAML(terminal.JSON(data))
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, terminal.Text(string(out)))
	return err
}

// escapeValues is a copy of v, an object as JSON decodes it, with each
// string made one line, its control characters escaped.
func escapeValues(v any) any {
	switch v := v.(type) {
	case string:
		return terminal.Line(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[terminal.Line(k)] = escapeValues(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = escapeValues(e)
		}
		return out
	}
	return v
}

// columnsPrinter prints -o custom-columns: a header, and a row for each
// object with the values that each column's JSONPath finds in it.
type columnsPrinter struct {
	headers []string
	paths   []*jsonpath.JSONPath
}

func newColumnsPrinter(spec string) (*columnsPrinter, error) {
	p := &columnsPrinter{}
	for column := range strings.SplitSeq(spec, ",") {
		header, path, ok := strings.Cut(column, ":")
		if !ok || header == "" || path == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH, for example STATE:.status.state", column)
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if err := jp.Parse(relaxed(path)); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", header, err)
		}
		p.headers, p.paths = append(p.headers, header), append(p.paths, jp)
	}
	return p, nil
}

// relaxed is a JSONPath as custom columns take it, with or without its
// braces and leading dot, in braces.
func relaxed(path string) string {
	path = strings.TrimSuffix(strings.TrimPrefix(path, "{"), "}")
	if !strings.HasPrefix(path, ".") {
		path = "." + path
	}
	return "{" + path + "}"
}

// PrintObj prints a list's items, or one object, in columns.
func (p *columnsPrinter) PrintObj(obj runtime.Object, w io.Writer) error {
	var items []unstructured.Unstructured
	switch o := obj.(type) {
	case *unstructured.UnstructuredList:
		items = o.Items
	case *unstructured.Unstructured:
		items = []unstructured.Unstructured{*o}
	default:
		return errors.New("-o custom-columns prints only objects read from the cluster")
	}
	rows := [][]string{p.headers}
	for _, item := range items {
		row := make([]string, len(p.paths))
		for i, jp := range p.paths {
			found, err := jp.FindResults(item.Object)
			if err != nil {
				return fmt.Errorf("-o custom-columns: column %s: %w", p.headers[i], err)
			}
			var values []string
			for _, group := range found {
				for _, v := range group {
					values = append(values, fmt.Sprint(v.Interface()))
				}
			}
			row[i] = strings.Join(values, ",")
			if len(values) == 0 {
				row[i] = "<none>"
			}
		}
		rows = append(rows, row)
	}
	table(w, rows)
	return nil
}
