// Package alerts holds Prometheus alert rules for the metrics of kfsm
// machines: objects Stalled, a state that keeps failing, actions that keep
// failing, objects at work that no longer move, and status writes that the
// API server refuses. Beside them is a Grafana dashboard of the same
// metrics: objects by state, transitions, time in a state, stalled
// objects, handler failures, actions and their durations, and the slots
// of sharded replicas.
//
// The rules are a PrometheusRule, prometheusrule.yaml in this directory,
// which a cluster that runs the Prometheus operator applies as it is; the
// rule groups under spec suit a plain Prometheus. The dashboard,
// grafana-dashboard.json, is imported into Grafana as it is and asks for
// a Prometheus data source. kfsm's tests check the rules with promtool and
// prove them against the series of a failing machine, and check that
// every query of the dashboard is valid and names only metrics that
// running machines export.
package alerts

import _ "embed"

// PrometheusRule is the content of prometheusrule.yaml.
//
//go:embed prometheusrule.yaml
var PrometheusRule []byte

// GrafanaDashboard is the content of grafana-dashboard.json.
//
//go:embed grafana-dashboard.json
var GrafanaDashboard []byte
