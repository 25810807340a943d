package graph

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCoverageEdges(t *testing.T) {
	cases := map[string]struct {
		reason string
		graph  *Graph
		want   []EdgeKey
	}{
		"Moose": {
			reason: "the edges in Edges order, then the deletion entry; a retries without To is no edge",
			graph:  moose(),
			want: []EdgeKey{
				{From: "Tagged", To: "Roaming", Kind: "exit"},
				{From: "Roaming", To: "Eating", Kind: "exit"},
				{From: "Roaming", To: "Sleeping", Kind: "exit"},
				{From: "Roaming", To: "Lost", Kind: "timeout"},
				{From: "Eating", To: "Sleeping", Kind: "exit"},
				{From: "Eating", To: "Lost", Kind: "retries"},
				{From: "Sleeping", To: "Roaming", Kind: "exit"},
				{From: "Releasing", To: "Released", Kind: "exit"},
				{From: "Releasing", To: "Released", Kind: "timeout"},
				{To: "Releasing", Kind: DeleteEntry},
			},
		},
		"Webapp": {
			reason: "without an OnDelete state there is no deletion entry",
			graph:  webapp(),
			want: []EdgeKey{
				{From: "Validate", To: "ConfigMap", Kind: "exit"},
				{From: "ConfigMap", To: "Deployment", Kind: "exit"},
				{From: "Deployment", To: "Service", Kind: "exit"},
				{From: "Deployment", To: "Available", Kind: "exit"},
				{From: "Service", To: "Available", Kind: "exit"},
				{From: "Available", To: "Ready", Kind: "exit"},
			},
		},
		"DuplicateExit": {
			reason: "an invalid graph that lists an exit twice counts it once",
			graph: &Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B", "B"}},
				{Name: "B", Final: true},
			}},
			want: []EdgeKey{{From: "A", To: "B", Kind: "exit"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.graph.CoverageEdges()); diff != "" {
				t.Errorf("%s\nCoverageEdges() (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// mooseTaken leaves untaken an exit with a priority, an exit without one,
// the timeout, the retries edge and the deletion entry, and counts one
// edge zero times, which is the same as not at all.
func mooseTaken() map[EdgeKey]int {
	return map[EdgeKey]int{
		{From: "Tagged", To: "Roaming", Kind: "exit"}:        4,
		{From: "Roaming", To: "Eating", Kind: "exit"}:        3,
		{From: "Eating", To: "Sleeping", Kind: "exit"}:       2,
		{From: "Sleeping", To: "Roaming", Kind: "exit"}:      0,
		{From: "Releasing", To: "Released", Kind: "timeout"}: 1,
	}
}

func TestCoverageExportsMatchGoldenFiles(t *testing.T) {
	g := moose()
	for name, got := range map[string]string{
		"moose.cover.mmd": g.MermaidCoverage(mooseTaken()),
		"moose.cover.dot": g.DOTCoverage(mooseTaken()),
	} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./graph -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("%s (-golden +got):\n%s", path, diff)
		}
	}
}

func TestFullCoverageDrawsThePlainGraph(t *testing.T) {
	for _, g := range []*Graph{moose(), webapp()} {
		all := map[EdgeKey]int{}
		for _, e := range g.CoverageEdges() {
			all[e] = 1
		}
		if diff := cmp.Diff(g.Mermaid(), g.MermaidCoverage(all)); diff != "" {
			t.Errorf("%s: MermaidCoverage() of every edge taken differs from Mermaid() (-want +got):\n%s", g.Name, diff)
		}
		if diff := cmp.Diff(g.DOT(), g.DOTCoverage(all)); diff != "" {
			t.Errorf("%s: DOTCoverage() of every edge taken differs from DOT() (-want +got):\n%s", g.Name, diff)
		}
	}
}
