package leancache

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// f runs after each transform the options give, on what it returned, and
// alone where they give none; the options given stay as they were.
func TestAfterRunsLastEverywhere(t *testing.T) {
	var ran []string
	own := func(name string) func(any) (any, error) {
		return func(obj any) (any, error) {
			ran = append(ran, name)
			return obj, nil
		}
	}
	cm := &corev1.ConfigMap{}
	co := cache.Options{
		DefaultNamespaces: map[string]cache.Config{"a": {Transform: own("namespace a")}, "b": {}},
		ByObject: map[client.Object]cache.ByObject{
			cm:            {Transform: own("configmaps")},
			&corev1.Pod{}: {},
		},
	}
	out := After(co, func(any) { ran = append(ran, "f") })
	run := func(tf func(any) (any, error), want ...string) {
		t.Helper()
		ran = nil
		if _, err := tf(&corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
		if len(ran) != len(want) {
			t.Fatalf("ran %v, want %v", ran, want)
		}
		for i := range want {
			if ran[i] != want[i] {
				t.Fatalf("ran %v, want %v", ran, want)
			}
		}
	}
	run(out.DefaultTransform, "f")
	run(out.DefaultNamespaces["a"].Transform, "namespace a", "f")
	run(out.ByObject[cm].Transform, "configmaps", "f")
	if out.DefaultNamespaces["b"].Transform != nil {
		t.Error("a namespace without a transform got one: it would not default to the default transform")
	}
	if co.DefaultTransform != nil {
		t.Error("the options given changed")
	}
	run(co.ByObject[cm].Transform, "configmaps")
}

// A transform's error stops there: f does not run on what failed.
func TestAfterStopsAtAnError(t *testing.T) {
	failed := errors.New("refused")
	ran := false
	out := After(cache.Options{DefaultTransform: func(any) (any, error) { return nil, failed }}, func(any) { ran = true })
	if _, err := out.DefaultTransform(&corev1.ConfigMap{}); !errors.Is(err, failed) || ran {
		t.Errorf("error %v and f ran %v, want the transform's error and no run", err, ran)
	}
}
