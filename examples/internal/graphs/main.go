// Command graphs writes each example machine's graph into its CRD's
// manifest, in the annotation that fsm's Machine.GraphAnnotation makes,
// so that a CRD carries its graph as installed and the examples'
// operators need no write on CRDs. It keeps the graphs of each machine's
// versions in the example's lock file (moose.graph.lock.json), and refuses a graph that
// would strand the objects of a locked one: a state gone with no
// migration to move them. kfsm's make generate runs it after
// controller-gen has written the CRDs:
//
//	go run ./examples/internal/graphs examples
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/examples/autoupdate"
	autoupdatev1alpha1 "github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/examples/database"
	databasev1alpha1 "github.com/kfsm/kfsm/examples/database/v1alpha1"
	"github.com/kfsm/kfsm/examples/moose"
	moosev1alpha1 "github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/examples/webapp"
	webappv1alpha1 "github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// crd is one example's CRD manifest and the machine that drives its kind,
// at the version that the machine reads.
type crd struct {
	file       string // under the examples directory
	version    schema.GroupVersion
	annotation func(fsm.PublishedResource) (key, value string, err error)
	graph      *graph.Graph
	stranded   func(*graph.Graph) []graph.State
}

// crdOf is the CRD of file, driven by m at version.
func crdOf[T fsm.Object](file string, version schema.GroupVersion, m *fsm.Machine[T]) crd {
	return crd{file: file, version: version, annotation: m.GraphAnnotation, graph: m.Graph(), stranded: m.Stranded}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: graphs EXAMPLES-DIRECTORY")
		os.Exit(2)
	}
	crds := []crd{
		crdOf("moose/crd/examples.kfsm.dev_moose.yaml", moosev1alpha1.GroupVersion, moose.NewHerd(1).Machine()),
		crdOf("webapp/crd/examples.kfsm.dev_webapps.yaml", webappv1alpha1.GroupVersion, (&webapp.Operator{}).Machine()),
		crdOf("autoupdate/crd/examples.kfsm.dev_managedclients.yaml", autoupdatev1alpha1.GroupVersion, (&autoupdate.Operator{}).Machine()),
		crdOf("database/crd/examples.kfsm.dev_databases.yaml", databasev1alpha1.GroupVersion, (&database.Operator{}).Machine()),
	}
	for _, c := range crds {
		file := filepath.Join(os.Args[1], filepath.FromSlash(c.file))
		// The machine is declared in the package above the crd directory.
		lock, err := graph.UpdateLockFile(filepath.Dir(filepath.Dir(file)), c.graph, c.stranded)
		if err != nil {
			fmt.Fprintln(os.Stderr, "graphs:", err)
			os.Exit(1)
		}
		if err := annotate(file, c, lock); err != nil {
			fmt.Fprintln(os.Stderr, "graphs:", err)
			os.Exit(1)
		}
	}
}

// annotate writes the machine's annotation into the CRD of file, which
// names the resource: its group, kind and plural. The annotation carries
// the graphs of the machine's earlier versions that lock keeps.
func annotate(file string, c crd, lock *graph.Lock) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var spec struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind   string `json:"kind"`
				Plural string `json:"plural"`
			} `json:"names"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if spec.Spec.Group != c.version.Group {
		return fmt.Errorf("%s: the CRD's group is %q, not the machine's %q", file, spec.Spec.Group, c.version.Group)
	}
	key, value, err := c.annotation(fsm.PublishedResource{
		Group: c.version.Group, Version: c.version.Version, Kind: spec.Spec.Names.Kind, Resource: spec.Spec.Names.Plural,
	})
	if err != nil {
		return err
	}
	var published fsm.PublishedGraph
	if err := json.Unmarshal([]byte(value), &published); err != nil {
		return err
	}
	if published.Earlier, err = lock.Earlier(c.graph.Version); err != nil {
		return err
	}
	full, err := json.Marshal(published)
	if err != nil {
		return err
	}
	meta, ok := doc["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s: %w", file, errors.New("no metadata"))
	}
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[key] = string(full)
	meta["annotations"] = annotations
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	// As controller-gen writes a CRD: a document marker, then the keys in
	// order.
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}
