// Package logvalues gives a logger key-value pairs that its lines carry,
// without the cost of a logger made with them.
//
// logr's WithValues has the sink make a logger that holds the pairs; zap,
// which controller-runtime's loggers wrap, encodes them into a buffer of
// its own at once. A machine gives each handler a logger of its state,
// and most handlers log nothing: the pairs are better added to the lines
// that are written.
package logvalues

import "github.com/go-logr/logr"

// With returns l, whose lines carry the pairs keysAndValues after l's own.
func With(l logr.Logger, keysAndValues ...any) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l // logr.Discard
	}
	// The sink's caller is one frame further up: this package's.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return l.WithSink(&adding{LogSink: sink, values: keysAndValues})
}

// adding is a sink that adds values to each line of the one it wraps,
// which has its caller a frame further up.
type adding struct {
	logr.LogSink
	values []any
}

func (a *adding) Info(level int, msg string, keysAndValues ...any) {
	a.LogSink.Info(level, msg, a.with(keysAndValues)...)
}

func (a *adding) Error(err error, msg string, keysAndValues ...any) {
	a.LogSink.Error(err, msg, a.with(keysAndValues)...)
}

// with returns the sink's values and then keysAndValues.
func (a *adding) with(keysAndValues []any) []any {
	all := make([]any, 0, len(a.values)+len(keysAndValues))
	return append(append(all, a.values...), keysAndValues...)
}

func (a *adding) WithValues(keysAndValues ...any) logr.LogSink {
	return &adding{LogSink: a.LogSink.WithValues(keysAndValues...), values: a.values}
}

func (a *adding) WithName(name string) logr.LogSink {
	return &adding{LogSink: a.LogSink.WithName(name), values: a.values}
}

// WithCallDepth keeps the sink's caller right when a caller wraps the
// logger further.
func (a *adding) WithCallDepth(depth int) logr.LogSink {
	cd, ok := a.LogSink.(logr.CallDepthLogSink)
	if !ok {
		return a
	}
	return &adding{LogSink: cd.WithCallDepth(depth), values: a.values}
}
