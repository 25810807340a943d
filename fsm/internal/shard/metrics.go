package shard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kfsm/kfsm/fsm/internal/metrics"
)

// shardMetrics are a group's series.
type shardMetrics struct {
	name           string
	members, slots prometheus.Gauge
	standingAside  prometheus.Gauge
	handovers      *prometheus.CounterVec
	ranges         string // the slots of the range series
}

// held shows the slots that the replica holds.
func (m *shardMetrics) held(s Slots) {
	m.slots.Set(float64(s.count()))
	if text := s.String(); text != m.ranges {
		shardRanges.DeleteLabelValues(m.name, m.ranges)
		shardRanges.WithLabelValues(m.name, text).Set(1)
		m.ranges = text
	}
}

var (
	shardMembers       = metrics.Gauges("kfsm_shard_members", "Live replicas that this replica sees in its group, itself included.", "shards")
	shardStandingAside = metrics.Gauges("kfsm_shard_members_standing_aside", "Live replicas that this replica sees in its group whose machines' graph version is older than the newest, and which hold no slot.", "shards")
	shardSlots         = metrics.Gauges("kfsm_shard_slots", "Hash slots, of 64, whose objects this replica reconciles.", "shards")
	shardRanges        = metrics.Gauges("kfsm_shard_range", "1 for the slots that this replica holds, such as \"0-20,42\"; the hash range of slot i is [i, i+1) times 2^58.", "shards", "slots")
	shardHandovers     = metrics.Counters("kfsm_shard_handovers_total", "Hash slots that this replica gained or released.", "shards", "direction")
	shardFallback      = metrics.Gauges("kfsm_shard_fallback", "1 when the API server did not honour the shard selector for a resource, so that this replica caches all of its objects.", "shards", "resource")
)

func newShardMetrics(name string) *shardMetrics {
	return &shardMetrics{
		name:          name,
		ranges:        "-",
		members:       shardMembers.WithLabelValues(name),
		slots:         shardSlots.WithLabelValues(name),
		standingAside: shardStandingAside.WithLabelValues(name),
		handovers:     shardHandovers,
	}
}
