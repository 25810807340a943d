package kubectlfsm

import (
	"errors"
	"fmt"
	"os"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/fsm"
)

// The exit statuses of why, for scripts. 0 is an object that is Ready or
// on its way there; 1 is an error (no such object, a bad flag).
const (
	// ExitStalled is an object that kfsm stopped retrying: it waits for a
	// new spec or kubectl fsm retry.
	ExitStalled = 2
	// ExitFailing is an object whose handler fails and that kfsm retries.
	ExitFailing = 3
	// ExitPaused is an object that the kfsm.dev/paused annotation holds.
	ExitPaused = 4
)

// ExitError is the result of a command that printed what it found in
// full and reports it by its exit status as well; it is not a failure of
// the command, and there is nothing more to print.
type ExitError struct {
	Code   int
	Reason string // what the status means, in a few words
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s (exit status %d)", e.Reason, e.Code)
}

// ExitCode is the exit status for err: 0 for nil, an ExitError's code,
// and 1 for any other error.
func ExitCode(err error) int {
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	}
	return 1
}

// Exit ends the program with err's exit status, after printing err as
// "name: err" unless it is an ExitError, whose command printed it all.
func Exit(name string, err error) {
	var exit *ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, name+":", terminal.Text(err.Error()))
	}
	os.Exit(ExitCode(err))
}

// whyExit is the ExitError for the object that why explains, or nil for
// an object that is Ready or on its way there. It reads the object in the
// order that writeWhy does.
func whyExit(o inspect.Object) error {
	switch {
	case o.Paused && !o.Deleting:
		return &ExitError{Code: ExitPaused, Reason: "paused"}
	case o.Status.ObservedGeneration < o.Generation && !o.Deleting:
		return nil // the operator has a new spec to act on
	case isTrue(o, fsm.ConditionStalled):
		return &ExitError{Code: ExitStalled, Reason: "stalled"}
	case isTrue(o, fsm.ConditionReady):
		return nil
	case o.Status.Failures > 0:
		return &ExitError{Code: ExitFailing, Reason: "its handler is failing"}
	}
	return nil
}
