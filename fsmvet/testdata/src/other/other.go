// Package other declares states on machines it is given, as a library
// outside kfsm might.
package other

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

func AddArchive[T fsm.Object](m *fsm.Machine[T]) {
	m.State("Archived", func(context.Context, *fsm.Request[T]) fsm.Result { return fsm.Done() }, fsm.Final())
}
