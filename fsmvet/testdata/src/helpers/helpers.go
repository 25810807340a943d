// Package helpers builds its machine across helper functions, and its
// handlers return results that helpers make.
package helpers

import (
	"context"
	"errors"
	"time"

	"github.com/kfsm/kfsm/fsm"
)

type Backup struct{}

func (*Backup) GetName() string { return "backup" }

const (
	Start    fsm.State = "Start"
	Copying  fsm.State = "Copying"
	Checking fsm.State = "Checking"
	Done     fsm.State = "Done"
	Failed   fsm.State = "Failed"
	Cleanup  fsm.State = "Cleanup"
)

type request = fsm.Request[*Backup]

type Op struct{ fast, broken bool }

func (o *Op) Machine() *fsm.Machine[*Backup] {
	m := fsm.New[*Backup]("helpers", fsm.Lifecycle).Initial(Start)
	m = o.work(m)
	withCleanup(m, o.cleanup)
	return m.State(Done, nil, fsm.Final())
}

func (o *Op) work(m *fsm.Machine[*Backup]) *fsm.Machine[*Backup] {
	return m.
		State(Start, o.start, fsm.To(Copying)).
		State(Copying, o.copy, fsm.To(Checking), fsm.RetriesThen(3, Failed)).
		State(Checking, o.check, fsm.To(Done, Failed)).
		State(Failed, o.failed, fsm.To(Start))
}

// withCleanup is generic, as a helper shared by operators would be.
func withCleanup[T fsm.Object](m *fsm.Machine[T], h fsm.Handler[T]) {
	m.OnDelete(Cleanup).State(Cleanup, h, fsm.Final())
}

func (o *Op) start(_ context.Context, r *request) fsm.Result {
	return o.advance(r)
}

func (o *Op) advance(r *request) fsm.Result {
	if o.fast {
		return fsm.Next(Checking) // want `state Start asks to move to Checking, which is not among its exits \[Copying\]`
	}
	if o.broken {
		return fsm.Next("Finished") // want `state Start asks to move to Finished, but no state Finished is declared; its exits are \[Copying\]`
	}
	return fsm.Next(Copying)
}

func (o *Op) copy(_ context.Context, r *request) fsm.Result {
	res := fsm.Wait(time.Second, "Copying")
	if o.fast {
		res = fsm.Next(Checking)
	}
	if o.broken {
		res = fsm.Next(Cleanup) // want `state Copying asks to move to Cleanup, which is not among its exits \[Checking\]`
	}
	return res
}

func (o *Op) check(_ context.Context, r *request) fsm.Result {
	if res, ok := o.verdict(r); ok {
		return res
	}
	return fsm.Wait(time.Second, "Checking")
}

func (o *Op) verdict(r *request) (fsm.Result, bool) {
	if o.broken {
		return fsm.Next(Failed), true
	}
	if o.fast {
		return fsm.Next(Done), true
	}
	return fsm.Next("Don"), false // want `state Checking asks to move to Don, but no state Don is declared \(did you mean Done\?\); its exits are \[Done, Failed\]`
}

func (o *Op) failed(_ context.Context, r *request) (res fsm.Result) {
	defer func() {
		if recover() != nil {
			res = fsm.Fail(errors.New("panicked"))
		}
	}()
	res = fsm.Next(Start)
	return
}

func (o *Op) cleanup(context.Context, *request) fsm.Result { return fsm.Done() }
