package leancache

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Memo returns a mapper that answers as mapper does, and remembers each
// mapping that it found of a kind at one version. It forgets nothing: a
// kind's mapping at a version changes only when its CustomResourceDefinition
// is deleted and made again with another scope, and controller-runtime's
// mapper, which discovers each API group once, does not see that either.
// What mapper did not find is asked again each time. Memo of nil is nil.
func Memo(mapper meta.RESTMapper) meta.RESTMapper {
	if mapper == nil {
		return nil
	}
	return &memo{RESTMapper: mapper}
}

type memo struct {
	meta.RESTMapper
	found sync.Map // schema.GroupVersionKind to *meta.RESTMapping
}

// RESTMapping returns the mapping of gk at versions. Only a mapping asked
// for at exactly one version is remembered: with none or several, which
// one the mapper picks depends on what the API server prefers.
func (m *memo) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	gvk := gk.WithVersion(versions[0])
	found, ok := m.found.Load(gvk)
	if !ok {
		mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
		if err != nil {
			return nil, err
		}
		found, _ = m.found.LoadOrStore(gvk, mapping)
	}
	mapping := *found.(*meta.RESTMapping) // a copy: the caller may change it
	return &mapping, nil
}
