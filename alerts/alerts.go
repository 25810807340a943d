// Package alerts holds Prometheus alert rules for the metrics of kfsm
// machines: objects Stalled, a state that keeps failing, actions that keep
// failing, objects at work that no longer move, and status writes that the
// API server refuses.
//
// The rules are a PrometheusRule, prometheusrule.yaml in this directory,
// which a cluster that runs the Prometheus operator applies as it is; the
// rule groups under spec suit a plain Prometheus. kfsm's tests check them
// with promtool and prove them against the series of a failing machine.
package alerts

import _ "embed"

// PrometheusRule is the content of prometheusrule.yaml.
//
//go:embed prometheusrule.yaml
var PrometheusRule []byte
