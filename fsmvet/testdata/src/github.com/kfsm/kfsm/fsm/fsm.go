// Package fsm stands in for kfsm's fsm package in the analyzer's tests:
// the declarations that the analyzer reads, with the same signatures
// (TestStandInMatchesFsm checks them), and no Kubernetes.
package fsm

import (
	"context"
	"time"

	"github.com/kfsm/kfsm/graph"
)

type State string

// Object is client.Object and FSMStatus in the real package.
type Object interface {
	GetName() string
}

type Mode = graph.Mode

const (
	Lifecycle = graph.Lifecycle
	Pipeline  = graph.Pipeline
)

type Handler[T Object] func(ctx context.Context, r *Request[T]) Result

type Request[T Object] struct {
	Object        T
	State, From   State
	Since         time.Time
	Attempt       int
	Goal, NextHop State
}

type Result struct {
	next State
	also []State
}

func Next(to State, also ...State) Result { return Result{next: to, also: also} }

const Default State = "(default)"

func Wait(after time.Duration, reason string) Result { return Result{} }

func Done() Result { return Result{} }

func Fail(err error) Result { return Result{} }

func Stop(reason, message string) Result { return Result{} }

type StateOption func(*stateOptions)

type stateOptions struct{}

func To(states ...State) StateOption { return nil }

func Final() StateOption { return nil }

func Timeout(after time.Duration, to State) StateOption { return nil }

func Retries(n int) StateOption { return nil }

func RetriesThen(n int, to State) StateOption { return nil }

type Machine[T Object] struct{}

func New[T Object](name string, mode Mode) *Machine[T] { return &Machine[T]{} }

func (m *Machine[T]) Initial(s State) *Machine[T] { return m }

func (m *Machine[T]) OnDelete(s State) *Machine[T] { return m }

func (m *Machine[T]) State(s State, h Handler[T], opts ...StateOption) *Machine[T] { return m }

func (m *Machine[T]) Goal(goal func(T) State) *Machine[T] { return m }

type Tuning struct {
	HistoryLimit int
	Resync       time.Duration
}

func (m *Machine[T]) Tune(t Tuning) *Machine[T] { return m }

func (m *Machine[T]) Build() error { return nil }

type Migration struct{}

func Rename(from, to State) Migration { return Migration{} }

func Merge(into State, from ...State) Migration { return Migration{} }

func Remove(state, to State) Migration { return Migration{} }

func Split[T Object](from State, pick func(T) State) Migration { return Migration{} }

func (m *Machine[T]) Version(n int, migrations ...Migration) *Machine[T] { return m }
