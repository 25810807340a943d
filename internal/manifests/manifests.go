// Package manifests reads Kubernetes objects from the YAML files of file
// systems, such as the CRDs and roles that controller-gen writes.
package manifests

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Read decodes every object in the .yaml and .yml files of fss, which
// must all be of kind.
func Read[T any, P interface {
	*T
	runtime.Object
}](fss []fs.FS, kind string) ([]P, error) {
	var objs []P
	for _, fsys := range fss {
		err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := path.Ext(name); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			f, err := fsys.Open(name)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
			for {
				obj := P(new(T))
				if err := dec.Decode(obj); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return fmt.Errorf("reading %ss from %s: %w", kind, name, err)
				}
				if k := obj.GetObjectKind().GroupVersionKind().Kind; k != kind {
					return fmt.Errorf("reading %ss from %s: found a %q, not a %s", kind, name, k, kind)
				}
				objs = append(objs, obj)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return objs, nil
}
