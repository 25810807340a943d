package dashboard

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
)

// fleetGraph is a machine of the size a platform team's operator reaches:
// 50 states for a managed Kubernetes cluster, from validation through
// provisioning to Ready, with upgrades, scaling, repairs and certificate
// rotation around Ready, timeouts and retries that lead aside, and a
// deletion path of its own.
func fleetGraph() *graph.Graph {
	minutes := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	s := func(name graph.State, exits ...graph.State) graph.StateSpec {
		return graph.StateSpec{Name: name, Exits: exits}
	}
	timeout := func(spec graph.StateSpec, after time.Duration, to graph.State) graph.StateSpec {
		spec.Timeout = &graph.Timeout{After: after, To: to}
		return spec
	}
	retries := func(spec graph.StateSpec, limit int, to graph.State) graph.StateSpec {
		spec.Retries = &graph.Retries{Limit: limit, To: to}
		return spec
	}
	final := func(name graph.State) graph.StateSpec { return graph.StateSpec{Name: name, Final: true} }
	states := []graph.StateSpec{
		{Name: "Pending", Initial: true, Exits: []graph.State{"Validating"}},
		s("Validating", "Admitted", "Rejected"),
		timeout(s("Admitted", "ReservingQuota"), minutes(10), "QueuedForCapacity"),
		s("QueuedForCapacity", "ReservingQuota"),
		retries(s("ReservingQuota", "AllocatingNetwork"), 3, "QuotaExceeded"),
		s("QuotaExceeded", "ReservingQuota"),
		s("AllocatingNetwork", "CreatingVPC"),
		retries(s("CreatingVPC", "CreatingSubnets"), 5, "NetworkFailed"),
		s("CreatingSubnets", "CreatingSecurityGroups"),
		s("CreatingSecurityGroups", "IssuingCertificates"),
		s("IssuingCertificates", "ProvisioningControlPlane"),
		timeout(s("ProvisioningControlPlane", "WaitingForControlPlane"), minutes(30), "ControlPlaneFailed"),
		timeout(s("WaitingForControlPlane", "BootstrappingEtcd"), minutes(20), "ControlPlaneFailed"),
		s("BootstrappingEtcd", "InstallingCNI"),
		s("InstallingCNI", "InstallingDNS"),
		s("InstallingDNS", "ProvisioningNodePools"),
		retries(s("ProvisioningNodePools", "JoiningNodes"), 3, "NodePoolFailed"),
		timeout(s("JoiningNodes", "InstallingAddons"), minutes(15), "NodePoolFailed"),
		s("InstallingAddons", "ConfiguringIngress"),
		s("ConfiguringIngress", "ConfiguringMonitoring"),
		s("ConfiguringMonitoring", "RunningConformance"),
		retries(s("RunningConformance", "Ready"), 2, "ConformanceFailed"),
		s("Ready", "PlanningUpgrade", "ScalingUp", "ScalingDown", "Degraded", "RotatingCertificates", "BackingUp"),
		s("PlanningUpgrade", "DrainingNodes", "Ready"),
		s("DrainingNodes", "UpgradingControlPlane"),
		timeout(s("UpgradingControlPlane", "UpgradingNodes"), minutes(45), "RollingBack"),
		s("UpgradingNodes", "VerifyingUpgrade"),
		s("VerifyingUpgrade", "Ready", "RollingBack"),
		s("RollingBack", "Ready", "Degraded"),
		s("ScalingUp", "Ready"),
		s("ScalingDown", "Ready"),
		s("Degraded", "Repairing"),
		retries(s("Repairing", "Ready"), 3, "Failed"),
		s("RotatingCertificates", "Ready"),
		s("BackingUp", "Ready"),
		s("NetworkFailed", "AllocatingNetwork"),
		s("ControlPlaneFailed", "ProvisioningControlPlane", "Failed"),
		s("NodePoolFailed", "ProvisioningNodePools", "Failed"),
		s("ConformanceFailed", "InstallingAddons", "Failed"),
		final("Rejected"),
		final("Failed"),
		{Name: "Deleting", OnDelete: true, Exits: []graph.State{"DrainingWorkloads"}},
		s("DrainingWorkloads", "DeletingNodePools"),
		s("DeletingNodePools", "DeletingControlPlane"),
		s("DeletingControlPlane", "DeletingLoadBalancers"),
		s("DeletingLoadBalancers", "DeletingNetwork"),
		retries(s("DeletingNetwork", "ReleasingQuota"), 10, "Orphaned"),
		s("ReleasingQuota", "Deleted"),
		final("Orphaned"),
		final("Deleted"),
	}
	return &graph.Graph{Name: "managed-cluster", Mode: graph.Lifecycle, States: states}
}

// publishFleet publishes fleetGraph on the gadgets' CRD, alone, as its
// operator would, until the test ends. No operator runs: the tests write
// the gadgets' status themselves.
func publishFleet(t *testing.T, e *fsmtest.Env) *graph.Graph {
	t.Helper()
	unpublish(t, e)
	g := fleetGraph()
	data, err := g.CompactJSON()
	if err != nil {
		t.Fatal(err)
	}
	value, err := json.Marshal(fsm.PublishedGraph{Machine: g.Name, Resource: gadgetsResource, Graph: data})
	if err != nil {
		t.Fatal(err)
	}
	annotateGadgets(t, e, fsm.AnnotationGraphPrefix+g.Name, string(value))
	return g
}

func TestTheFleetGraphIsValidAndHasFiftyStates(t *testing.T) {
	g := fleetGraph()
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(g.States); n != 50 {
		t.Fatalf("the fleet graph has %d states, want 50", n)
	}
}
