package shard

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
	shardMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_members",
		Help: "Live replicas that this replica sees in its group, itself included.",
	}, []string{"shards"})
	shardStandingAside = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_members_standing_aside",
		Help: "Live replicas that this replica sees in its group whose machines' graph version is older than the newest, and which hold no slot.",
	}, []string{"shards"})
	shardSlots = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_slots",
		Help: "Hash slots, of 64, whose objects this replica reconciles.",
	}, []string{"shards"})
	shardRanges = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_range",
		Help: "1 for the slots that this replica holds, such as \"0-20,42\"; the hash range of slot i is [i, i+1) times 2^58.",
	}, []string{"shards", "slots"})
	shardHandovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_shard_handovers_total",
		Help: "Hash slots that this replica gained or released.",
	}, []string{"shards", "direction"})
	shardFallback = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_fallback",
		Help: "1 when the API server did not honour the shard selector for a resource, so that this replica caches all of its objects.",
	}, []string{"shards", "resource"})
)

func init() {
	metrics.Registry.MustRegister(shardMembers, shardStandingAside, shardSlots, shardRanges, shardHandovers, shardFallback)
}

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
