package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// shardedResource is a resource of a sharded machine, as the cache's
// transport sees it.
type Resource struct {
	gvk      schema.GroupVersionKind
	prefix   string // "/apis/<group>/<version>/", or "/api/v1/"
	resource string // the plural
	// children are selected by their LabelSlot, which every API server
	// honours; the machine's own objects by the shard selector.
	children bool

	// Under the Replica's mutex:
	support support
	probe   *http.Request     // a list of the resource, to ask with
	next    http.RoundTripper // where to ask
}

// support says whether the API server honours shard selectors for a
// resource.
type support int

const (
	unknown  support = iota // not asked, or no object to tell by
	honoured                // it selects
	ignored                 // it sends everything: the fallback
)

// NewResource is the resource of objects of gvk, whose plural is resource:
// a machine's own objects, or with children its children's.
func NewResource(gvk schema.GroupVersionKind, resource string, children bool) *Resource {
	prefix := "/apis/" + gvk.Group + "/" + gvk.Version + "/"
	if gvk.Group == "" {
		prefix = "/api/" + gvk.Version + "/"
	}
	r := &Resource{gvk: gvk, prefix: prefix, resource: resource, children: children}
	if children {
		r.support = honoured
	}
	return r
}

// collection reports whether path names the whole resource, in a
// namespace or across them.
func (r *Resource) collection(path string) bool {
	i := strings.Index(path, r.prefix)
	if i < 0 {
		return false
	}
	rest := path[i+len(r.prefix):]
	if ns, ok := strings.CutPrefix(rest, "namespaces/"); ok {
		_, rest, _ = strings.Cut(ns, "/")
	}
	return rest == r.resource
}

// selecting is the transport of the cache's HTTP client: it adds the
// replica's shard selector to the lists and watches of sharded machines'
// resources, and a selector of LabelSlot to those of their children's:
// of the slots that the request's context names (see reselecting), else
// of those that the cache selects now.
func (s *Replica) selecting(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			return next.RoundTrip(req)
		}
		r := s.resourceOf(req.URL.Path)
		if r == nil {
			return next.RoundTrip(req)
		}
		q := req.URL.Query()
		watching := q.Get("watch") == "true" || q.Get("watch") == "1"
		listing := !watching || q.Get("sendInitialEvents") == "true"
		s.mu.Lock()
		if r.probe == nil && listing {
			r.probe, r.next = req.Clone(context.Background()), next
		}
		s.mu.Unlock()
		if listing {
			if err := s.ask(req.Context(), r); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		// Until the server is known to ignore selectors, it is sent them:
		// a server that ignores them sends everything, which the replica
		// needs then anyway.
		selected, ignoring := s.selected, r.support == ignored
		s.mu.Unlock()
		if ignoring {
			return next.RoundTrip(req)
		}
		if named, ok := req.Context().Value(selectionKey{}).(Slots); ok {
			selected = named
		}
		if !r.children {
			q.Set("shardSelector", selectorOf(selected))
		} else if labels := childSelector(selected); labels != "" {
			if own := q.Get("labelSelector"); own != "" {
				labels = own + "," + labels
			}
			q.Set("labelSelector", labels)
		}
		req = req.Clone(req.Context())
		req.URL.RawQuery = q.Encode()
		return next.RoundTrip(req)
	})
}

func (s *Replica) resourceOf(path string) *Resource {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.resources {
		if r.collection(path) {
			return r
		}
	}
	return nil
}

// ask finds out, until it knows, whether the API server honours shard
// selectors for r.
//
// A server that honours them echoes the selector in the list's shardInfo;
// but Kubernetes 1.36 echoes it for built-in types only, not for custom
// resources, which it filters all the same. So ask lists one object with
// a selector of every hash: an echo says yes. Without one, it lists that
// object again, by name, with a selector of every hash but the object's:
// if the object comes back, the server ignores selectors. With no object
// to tell by, it asks again later.
func (s *Replica) ask(ctx context.Context, r *Resource) error {
	s.mu.Lock()
	template, next, known := r.probe, r.next, r.support != unknown
	s.mu.Unlock()
	if known || template == nil {
		return nil
	}
	list := func(query url.Values) (*metav1.PartialObjectMetadataList, error) {
		req := template.Clone(ctx)
		req.URL.RawQuery = query.Encode()
		req.Header.Set("Accept", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json")
		resp, err := next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("asking the API server whether it shards %s: %s: %s", r.resource, resp.Status, body)
		}
		var out metav1.PartialObjectMetadataList
		if err := json.Unmarshal(body, &out); err != nil {
			return nil, fmt.Errorf("asking the API server whether it shards %s: %w", r.resource, err)
		}
		return &out, nil
	}
	one, err := list(url.Values{"limit": {"1"}, "shardSelector": {selectorOf(^Slots(0))}})
	if err != nil {
		return err
	}
	answer := unknown
	switch {
	case one.ShardInfo != nil:
		answer = honoured
	case len(one.Items) == 1:
		x := one.Items[0]
		again, err := list(url.Values{
			"fieldSelector": {"metadata.name=" + x.Name},
			"shardSelector": {selectorOf(^Slots(0) &^ (1 << SlotOf(x.UID)))},
		})
		if err != nil {
			return err
		}
		answer = honoured
		if slices.ContainsFunc(again.Items, func(o metav1.PartialObjectMetadata) bool { return o.UID == x.UID }) {
			answer = ignored
		}
	}
	if answer == unknown {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.support != unknown {
		return nil
	}
	r.support = answer
	if answer == ignored {
		shardFallback.WithLabelValues(s.o.Name, r.resource).Set(1)
		s.log.Info("the API server does not honour shard selectors (Kubernetes 1.36 with the ShardedListAndWatch feature gate does): every replica caches every object of the resource and reconciles only its own", "resource", r.resource)
	} else {
		shardFallback.WithLabelValues(s.o.Name, r.resource).Set(0)
	}
	return nil
}

// askAgain asks about the resources still unknown; the membership calls
// it on every look.
func (s *Replica) askAgain(ctx context.Context) {
	s.mu.Lock()
	resources := slices.Clone(s.resources)
	s.mu.Unlock()
	for _, r := range resources {
		if err := s.ask(ctx, r); err != nil && ctx.Err() == nil {
			s.log.Error(err, "asking whether the API server shards", "resource", r.resource)
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
