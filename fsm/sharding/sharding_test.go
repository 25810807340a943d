package sharding_test

import (
	"testing"

	"github.com/kfsm/kfsm/fsm/internal/shard"
	"github.com/kfsm/kfsm/fsm/sharding"
)

// The replicas write on Leases and children the names that package
// sharding documents.
func TestTheMarksAreThePublicOnes(t *testing.T) {
	for public, internal := range map[string]string{
		sharding.LabelShards:        shard.LabelShards,
		sharding.AnnotationSlots:    shard.AnnotationSlots,
		sharding.AnnotationMachines: shard.AnnotationMachines,
		sharding.LabelSlot:          shard.LabelSlot,
	} {
		if public != internal {
			t.Errorf("package sharding documents %q, the replicas write %q", public, internal)
		}
	}
}
