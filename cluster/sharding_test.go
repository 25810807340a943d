package cluster_test

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kfsm/kfsm/cluster"
)

// lowerHalf selects the objects whose UID hashes below 2^63.
const lowerHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"

// inLowerHalf is lowerHalf on this side: FNV-1a, 64 bits, of the UID.
func inLowerHalf(uid string) bool {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return h.Sum64() < 1<<63
}

// With the ShardedListAndWatch gate on, the API server lists and watches
// only the slice that a shard selector names, hashing as the client
// does, and says so in the list's shardInfo; with it off, it sends
// everything and says nothing, which is how a client tells the two apart.
func TestFeatureGatesTurnOnShardedListAndWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	for _, gate := range []bool{true, false} {
		t.Run(fmt.Sprintf("ShardedListAndWatch=%t", gate), func(t *testing.T) {
			c, err := cluster.Start(t.Context(), cluster.Options{FeatureGates: map[string]bool{"ShardedListAndWatch": gate}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop() })
			cs, err := kubernetes.NewForConfig(c.Config)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			cms := cs.CoreV1().ConfigMaps("default")
			var all, lower []string
			for i := range 40 {
				cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, cm.Name)
				if inLowerHalf(string(cm.UID)) {
					lower = append(lower, cm.Name)
				}
			}
			if len(lower) == 0 || len(lower) == len(all) {
				t.Fatalf("%d of %d UIDs hash into the lower half; the test needs both halves", len(lower), len(all))
			}

			list, err := cms.List(ctx, metav1.ListOptions{ShardSelector: lowerHalf})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cm := range list.Items {
				if slices.Contains(all, cm.Name) {
					got = append(got, cm.Name)
				}
			}
			want := lower
			if !gate {
				want = all
			}
			if !slices.Equal(got, want) {
				t.Errorf("the list with the shard selector has %v, want %v", got, want)
			}
			switch {
			case gate && (list.ShardInfo == nil || list.ShardInfo.Selector != lowerHalf):
				t.Errorf("the list's shardInfo is %+v, want the selector echoed", list.ShardInfo)
			case !gate && list.ShardInfo != nil:
				t.Errorf("without the gate the list has shardInfo %+v, want none", list.ShardInfo)
			}

			// A watch with the selector sees only its slice's objects.
			w, err := cms.Watch(ctx, metav1.ListOptions{ShardSelector: lowerHalf, ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			var created, wantSeen []string
			for i := range 20 {
				cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%02d", i)}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				created = append(created, cm.Name)
				if !gate || inLowerHalf(string(cm.UID)) {
					wantSeen = append(wantSeen, cm.Name)
				}
			}
			// Events come in order: once the last of the slice has come,
			// an object beyond it would have come too.
			var seen []string
			for deadline := time.After(30 * time.Second); len(seen) < len(wantSeen); {
				select {
				case ev := <-w.ResultChan():
					cm, ok := ev.Object.(*corev1.ConfigMap)
					switch {
					case !ok || ev.Type != watch.Added || !slices.Contains(created, cm.Name):
					case !slices.Contains(wantSeen, cm.Name):
						t.Fatalf("the watch delivered %s, beyond its slice", cm.Name)
					default:
						seen = append(seen, cm.Name)
					}
				case <-deadline:
					t.Fatalf("the watch delivered %v within 30s, want %v", seen, wantSeen)
				}
			}
			if !slices.Equal(seen, wantSeen) {
				t.Errorf("the watch delivered %v, want %v", seen, wantSeen)
			}
		})
	}
}
