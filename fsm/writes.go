package fsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/wire"
)

const (
	// Condition messages are bounded; errors can be long.
	maxMessage = 1024
	// The events API refuses longer notes, actions and reasons.
	maxNote   = 1024
	maxAction = 128
	maxReason = 128
)

// write runs one of kfsm's writes of obj, so that its watch event is known
// for an echo.
func (r *reconciler[T]) write(obj T, do func() error) error {
	key := echo.KeyOf(r.gk, obj)
	r.echoes.Begin(key, nil)
	err := do()
	var wrote client.Object
	if err == nil {
		wrote = obj
	}
	if r.echoes.Wrote(key, wrote) {
		r.requeue(key.NamespacedName)
	}
	return err
}

// writeStatus writes what the walk changed in the status since before, as
// a merge patch: only kfsm writes the status, so a change that someone
// else made to the object meanwhile (a label, the spec) does not make the
// walk's record a conflict, to be thrown away with the work it recorded.
func (r *reconciler[T]) writeStatus(ctx context.Context, obj, before T) error {
	patch, err := statusPatch(before, obj)
	if err != nil {
		return fmt.Errorf("encoding the status: %w", err)
	}
	return r.write(obj, func() error {
		// The answer is read as metadata alone: its status is the one the
		// walk wrote, and decoding the whole object again cost the
		// operator more than the rest of the write.
		answer := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
		answer.SetGroupVersionKind(r.gvk)
		if err := r.client.Status().Patch(ctx, answer, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(r.m.FieldOwner())); err != nil {
			return err
		}
		obj.SetResourceVersion(answer.GetResourceVersion())
		return nil
	})
}

// statusPatch is the merge patch from before's status to obj's, made
// from the statuses alone, which is all the status subresource takes:
// encoding and comparing the whole objects, managed fields and all, cost
// several times as much. An object without a Status field is compared
// whole.
func statusPatch(before, obj runtime.Object) ([]byte, error) {
	from, err1 := json.Marshal(wire.Of(before))
	to, err2 := json.Marshal(wire.Of(obj))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	patch, err := wire.MergePatch(from, to)
	if err == nil && wire.Field(obj).IsValid() {
		patch = slices.Concat([]byte(`{"status":`), patch, []byte("}"))
	}
	return patch, err
}

func (r *reconciler[T]) patchFinalizer(ctx context.Context, obj T, change func(client.Object, string) bool) error {
	base := obj.DeepCopyObject().(T)
	change(obj, r.m.Finalizer())
	return r.write(obj, func() error {
		return r.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(r.m.FieldOwner()))
	})
}

// writeFailed turns a failed write into a result.
func (r *reconciler[T]) writeFailed(ctx context.Context, err error) (reconcile.Result, error) {
	if quiet(err) {
		logf.FromContext(ctx).V(1).Info("write not taken; retrying", "machine", r.m.name, "error", err.Error())
		return reconcile.Result{RequeueAfter: soon}, nil
	}
	return reconcile.Result{}, r.redactedError(err)
}

// quiet reports whether a failed write is the normal life of a controller:
// someone else changed the object meanwhile, or it is gone, or the
// manager stopped, as in every rolling update, and cancelled the write (the
// walk is not recorded, and the next process walks the object again).
// Such writes are retried soon, without an error.
func quiet(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || errors.Is(err, context.Canceled)
}

// unwritable reports a status that the API server refuses, for example
// one over its size limit: the walk is not recorded, so nothing of it is
// made visible, and a smaller write tries to get the news through.
func (r *reconciler[T]) unwritable(ctx context.Context, before T, err error) (reconcile.Result, error) {
	msg := r.errorText(err)
	r.b.metrics.StatusWriteError()
	r.event(before, nil, corev1.EventTypeWarning, ReasonStatusWriteFailed, "WriteStatus",
		"the status could not be written, so the last walk was not recorded: "+msg)
	small := before.DeepCopyObject().(T)
	st, gen, now := small.FSMStatus(), small.GetGeneration(), metav1.NewTime(r.m.clock.Now())
	message := "the status could not be written: " + msg
	for _, c := range []metav1.Condition{
		{Type: ConditionReady, Status: metav1.ConditionFalse},
		{Type: ConditionStalled, Status: metav1.ConditionTrue},
	} {
		c.Reason, c.Message, c.ObservedGeneration, c.LastTransitionTime = ReasonStatusWriteFailed, message, gen, now
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if !wire.Same(before, small) {
		if werr := r.writeStatus(ctx, small, before); werr != nil {
			logf.FromContext(ctx).V(1).Info("the smaller status could not be written either", "error", r.errorText(werr))
		}
	}
	return reconcile.Result{}, fmt.Errorf("writing the status of %s: %s", client.ObjectKeyFromObject(before), msg)
}

// event records an event about regarding, within the events API's limits.
func (r *reconciler[T]) event(regarding T, related runtime.Object, eventtype, reason, action, note string) {
	reason, action, note = eventText(reason, action, note)
	r.recorder.Eventf(regarding, related, eventtype, reason, action, note)
}

// eventText is an event's reason, action and note as the recorder takes
// them: one line each, within the events API's limits (the note is cut
// as a whole), and the note as a format, whose % are its own.
func eventText(reason, action, note string) (string, string, string) {
	note = strings.ReplaceAll(clip(oneLine(note), maxNote), "%", "%%")
	return clip(oneLine(reason), maxReason), clip(oneLine(action), maxAction), note
}

// redact filters a text that came from an error or a handler before kfsm
// writes it anywhere.
func (r *reconciler[T]) redact(s string) string {
	if r.m.redact == nil {
		return s
	}
	return r.m.redact(s)
}

// errorText is an error as conditions, events and spans show it.
func (r *reconciler[T]) errorText(err error) string { return truncate(r.redact(err.Error())) }

// redactedError is err as kfsm returns it to controller-runtime, which
// logs it.
func (r *reconciler[T]) redactedError(err error) error {
	if r.m.redact == nil {
		return err
	}
	return errors.New(r.m.redact(err.Error()))
}

// truncate makes s a condition message: one line, and bounded.
func truncate(s string) string { return clip(oneLine(s), maxMessage) }

// oneLine is s with each control character (C0, newlines and tabs
// included, DEL and C1) made a space: what kfsm writes to conditions and
// events is one line, with no escape sequence for a terminal that prints
// it to obey.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c > '~' }) {
		return s // printable ASCII, the usual case, without a call of the mapping per character
	}
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, s)
}

// clip shortens s to at most n bytes, cut at a character and marked with
// an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
