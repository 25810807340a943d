package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kfsm/kfsm/fsm/internal/wire"
)

// call runs a state's handler in its own span, turning a panic into a
// failure. A final state without a handler is done.
func (w *walker[T]) call(def *stateDef[T]) (res Result) {
	if def.handler == nil {
		return Done()
	}
	// What the handler changes is discarded if it asks for an undeclared
	// transition; before the first handler, the status is as it was read.
	if w.calls > 0 && !w.r.b.kfsmsOnly {
		w.snapshot = w.authorsStatus(w.obj)
	}
	w.calls++
	// A noop tracer's span under one that records nothing is one no reader of ctx tells apart: none starts.
	ctx, span := w.ctx, trace.Span(noop.Span{})
	if _, off := w.r.b.tracer.(noop.Tracer); !off || w.span.IsRecording() {
		ctx, span = w.r.b.tracer.Start(w.ctx, def.spanName, def.spanStart)
	}
	defer span.End()
	log := w.log
	if log.Enabled() {
		log = withValues(log, "machine", w.r.m.name, "state", def.name)
	}
	req := w.req
	*req = Request[T]{
		Object:     w.obj,
		Client:     w.r.client,
		Log:        log,
		Clock:      w.r.m.clock,
		State:      def.name,
		Attempt:    int(w.st.Failures) + 1,
		RetryAsked: w.retrying,
		Goal:       w.goal,
		w:          w,
	}
	if n := len(w.st.History); n > 0 {
		req.From = w.st.History[n-1].From // where the last transition came from
	}
	if w.goal != "" && w.goal != def.name {
		req.NextHop = w.r.b.hops[[2]State{def.name, w.goal}]
	}
	w.outputErr = nil
	if w.r.m.mode == Lifecycle {
		w.applied = w.applied[:0] // a lifecycle state desires what its latest run applied
	}
	req.Since = w.now
	if w.st.StateSince != nil && w.st.State == def.name {
		req.Since = w.st.StateSince.Time
	}
	defer func() {
		// Real time: a slow handler holds a worker in real time. The
		// engine's work since the last handler, microseconds, counts
		// towards this one.
		if w.r.m.slowAfter > 0 {
			handled := time.Since(w.began)
			w.r.slow(w.log, def.name, handled-w.handled)
			w.handled = handled
		}
		if p := recover(); p != nil {
			why := w.r.redact(fmt.Sprint(p))
			w.log.Error(errors.New(why), "handler panicked", "machine", w.r.m.name, "state", def.name, "stack", string(debug.Stack()))
			res = Fail(fmt.Errorf("handler panicked: %s", why))
		}
		if w.outputErr != nil && res.kind != resultFail {
			res = Fail(w.outputErr)
		}
		if res.kind == resultFail {
			span.SetStatus(codes.Error, w.r.errorText(res.err))
		}
	}()
	return def.handler(ctx, req)
}

// slow logs, once per state, a handler that ran for longer than the
// machine's Tuning.SlowHandlerAfter.
func (r *reconciler[T]) slow(log logr.Logger, state State, ran time.Duration) {
	if ran < r.m.slowAfter { // call times none when it is off
		return
	}
	if _, logged := r.slowLogged.LoadOrStore(state, true); logged {
		return
	}
	log.Info("a handler ran long, holding a reconcile worker: other objects waited meanwhile. Long work belongs in Request.Action, which runs outside the worker",
		"machine", r.m.name, "state", state, "ran", ran.Round(time.Millisecond).String(), "slowAfter", r.m.slowAfter.String())
}

// authorsStatus copies obj's status without kfsm's part, which kfsm
// keeps for itself: what a discard must restore.
func (w *walker[T]) authorsStatus(obj T) reflect.Value {
	f := wire.Field(obj)
	if !f.IsValid() {
		return reflect.Value{}
	}
	st := obj.FSMStatus()
	own := *st
	*st = Status{}
	defer func() { *st = own }()
	if copier := w.r.b.copyStatus; copier.IsValid() {
		return copier.Call([]reflect.Value{f.Addr()})[0].Elem()
	}
	return reflect.ValueOf(wire.Of(obj.DeepCopyObject()))
}

// discard undoes what the running handler changed in the status: its
// transition was refused, and so is its work. kfsm's own record stays.
func (w *walker[T]) discard() {
	f := wire.Field(w.obj)
	if !f.IsValid() || w.r.b.kfsmsOnly {
		return
	}
	snap := w.snapshot
	if w.calls <= 1 {
		snap = w.authorsStatus(w.before)
	}
	own := *w.st
	f.Set(snap)
	w.st = w.obj.FSMStatus()
	*w.st = own
}

// withValues returns l, whose lines carry the pairs keysAndValues after
// l's own, without the cost of a logger made with them: logr's
// WithValues has the sink make a logger that holds the pairs, and zap,
// which controller-runtime's loggers wrap, encodes them into a buffer of
// its own at once. A machine gives each handler a logger of its state,
// and most handlers log nothing: the pairs are better added to the lines
// that are written.
func withValues(l logr.Logger, keysAndValues ...any) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l // logr.Discard
	}
	// The sink's caller is one frame further up: this function's.
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
