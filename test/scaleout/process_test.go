//go:build linux

package scaleout_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kfsm/kfsm/internal/proctest"
)

// process is one operator process.
type process struct {
	*proctest.Process
	metrics string // host:port of its metrics endpoint
}

// startOperator starts the operator as the named replica. The process is
// killed when the test ends, and the end of its log shown if the test
// failed.
func startOperator(t *testing.T, bin, kubeconfig, namespace, name, recorder string) *process {
	t.Helper()
	p := &process{metrics: proctest.FreeAddr(t)}
	p.Process = proctest.Start(t, name, bin, []string{
		"-kubeconfig", kubeconfig,
		"-identity", name,
		"-namespace", namespace,
		"-recorder", recorder,
		"-metrics-addr", p.metrics,
		"-lease-duration", leaseDuration.String(),
		"-renew-deadline", renewDeadline.String(),
		"-retry-period", retryPeriod.String(),
		"-work", work.String(),
	}, proctest.Options{ShowLog: tail})
	return p
}

// logTail is how many lines of a replica's log a failed test shows.
const logTail = 150

// tail is the last logTail lines of a log, leaving out the transitions of
// single gadgets, which the recorder has.
func tail(log string) string {
	var lines []string
	for l := range strings.Lines(log) {
		if !strings.Contains(l, `"msg"="transition"`) {
			lines = append(lines, l)
		}
	}
	return fmt.Sprintf("its last %d lines but the transitions of single gadgets:\n%s", logTail, strings.Join(lines[max(0, len(lines)-logTail):], ""))
}

// scrape reads the process's metrics.
func (p *process) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s's metrics endpoint answered %s", p.Name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s's metrics: %w", p.Name, err)
	}
	return families, nil
}

// metrics is one scrape of a process's metrics endpoint.
type metrics map[string]*dto.MetricFamily

// value sums the samples of the named metric whose labels include those
// given, as name and value pairs: zero if there are none.
func (m metrics) value(name string, labels ...string) float64 {
	var sum float64
	for _, s := range m[name].GetMetric() {
		if hasLabels(s, labels) {
			sum += s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		}
	}
	return sum
}

// series lists the label sets and values of the named metric's samples.
func (m metrics) series(name string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[name].GetMetric() {
		var labels []string
		for _, l := range s.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		out["{"+strings.Join(labels, ",")+"}"] = v
	}
	return out
}

func hasLabels(s *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
