package fsm

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
)

// The bounds of Status, for the tests that hold the CRD and kfsm to them.
const (
	MaxStateName      = maxStateName
	MaxConditions     = maxConditions
	MaxPipelineStates = maxPipelineStates
	MaxHistory        = maxHistory
	MaxOutputs        = maxOutputs
	MaxRetryMark      = maxRetryMark
	MaxGroup          = maxGroup
	MaxKind           = maxKind
	MaxNamespace      = maxNamespace
	MaxName           = maxName
	MaxUID            = maxUID
	MaxVersion        = maxVersion
)

// EventWriter is kfsm's writer of events, for the tests of its series.
type EventWriter interface {
	events.EventRecorder
	Start(context.Context) error
}

// NewEventWriter is the writer that SetupWithManager makes, with its
// timing and queue shortened as given.
func NewEventWriter(cfg *rest.Config, scheme *runtime.Scheme, controller string, log logr.Logger, patchEvery, seriesWindow time.Duration, queueLimit int) (EventWriter, error) {
	c, err := typedeventsv1.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := newEventWriter(c, scheme, controller, log)
	w.patchEvery, w.seriesWindow, w.retryAfter, w.queueLimit = patchEvery, seriesWindow, patchEvery, queueLimit
	return w, nil
}
