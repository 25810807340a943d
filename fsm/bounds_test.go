package fsm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The bounds of Status are in the schema of every CRD that embeds it, and
// kfsm must never write a status that the API server refuses. These tests
// hold kfsm to the bounds, and the generated CRD to the same numbers.

// chain is a machine of n states, S1 to Sn, each passing to the next.
func chain(name string, mode fsm.Mode, n int) *fsm.Machine[*gadget] {
	m := fsm.New[*gadget](name, mode).Initial("S1")
	for i := 1; i < n; i++ {
		to := fsm.State(fmt.Sprintf("S%d", i+1))
		m.State(fsm.State(fmt.Sprintf("S%d", i)), next(to), fsm.To(to))
	}
	return m.State(fsm.State(fmt.Sprintf("S%d", n)), done, fsm.Final())
}

// named is a state name of n bytes, at least 65, that is a valid condition
// type: a DNS subdomain, a slash, and a name of 63 characters that ends in
// c.
func named(n int, c byte) fsm.State {
	return fsm.State(strings.Repeat("p", n-64) + "/" + strings.Repeat("N", 62) + string(c))
}

func TestBuildRefusesWhatTheStatusCannotHold(t *testing.T) {
	name64 := fsm.State(strings.Repeat("N", 64))
	cases := map[string]struct {
		reason  string
		machine *fsm.Machine[*gadget]
		want    graph.ProblemCode // empty: Build succeeds
	}{
		"HistoryLimitAtTheBound": {
			reason:  "status.history holds the largest HistoryLimit",
			machine: fsm.New[*gadget]("history", fsm.Lifecycle).Tune(fsm.Tuning{HistoryLimit: fsm.MaxHistory}).Initial("A").State("A", done, fsm.Final()),
		},
		"HistoryLimitPastTheBound": {
			reason:  "a longer history would be refused by the API server",
			machine: fsm.New[*gadget]("history", fsm.Lifecycle).Tune(fsm.Tuning{HistoryLimit: fsm.MaxHistory + 1}).Initial("A").State("A", done, fsm.Final()),
			want:    fsm.BadOption,
		},
		"LongestStateName": {
			reason:  "status.state holds a name as long as a condition type",
			machine: fsm.New[*gadget]("long", fsm.Lifecycle).Initial(named(fsm.MaxStateName, 'A')).State(named(fsm.MaxStateName, 'A'), done, fsm.Final()),
		},
		"StateNameOneByteTooLong": {
			reason:  "status.state, history and outputs could not hold the name",
			machine: fsm.New[*gadget]("long", fsm.Lifecycle).Initial(named(fsm.MaxStateName+1, 'A')).State(named(fsm.MaxStateName+1, 'A'), done, fsm.Final()),
			want:    fsm.LongStateName,
		},
		"PipelineStateOfTheLongestConditionType": {
			reason:  "a prefix, a slash and a name of 63 characters: 316 bytes",
			machine: fsm.New[*gadget]("long", fsm.Pipeline).Initial(named(fsm.MaxStateName, 'A')).State(named(fsm.MaxStateName, 'A'), done, fsm.Final()),
		},
		"PipelineStateWithANameOf64Characters": {
			reason:  "the name part of a condition type is at most 63 characters",
			machine: fsm.New[*gadget]("long", fsm.Pipeline).Initial(name64).State(name64, done, fsm.Final()),
			want:    fsm.BadConditionType,
		},
		"LifecycleStateWithANameOf64Characters": {
			reason:  "a lifecycle state names no condition",
			machine: fsm.New[*gadget]("long", fsm.Lifecycle).Initial(name64).State(name64, done, fsm.Final()),
		},
		"LargestPipeline": {
			reason:  "status.conditions holds kfsm's four conditions and one per state",
			machine: chain("large", fsm.Pipeline, fsm.MaxPipelineStates),
		},
		"PipelineOfOneStateTooMany": {
			reason:  "one condition per state would pass the bound of status.conditions",
			machine: chain("large", fsm.Pipeline, fsm.MaxPipelineStates+1),
			want:    fsm.TooManyStates,
		},
		"LifecycleOfAsManyStates": {
			reason:  "a lifecycle machine has no condition per state",
			machine: chain("large", fsm.Lifecycle, fsm.MaxPipelineStates+1),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.machine.Build()
			if tc.want == "" {
				if err != nil {
					t.Errorf("%s: Build() = %v, want nil", tc.reason, err)
				}
				return
			}
			var verr *graph.ValidationError
			if !errors.As(err, &verr) || !verr.Has(tc.want) {
				t.Errorf("%s: Build() = %v, want a %s problem", tc.reason, err, tc.want)
			}
		})
	}
}

// What Build accepts, kfsm writes, and the API server takes: the longest
// state names in the status and the history, and a condition for each
// state of the largest pipeline.
func TestTheLargestMachinesWriteTheirStatus(t *testing.T) {
	cases := map[string]struct {
		reason     string
		machine    *fsm.Machine[*gadget]
		state      fsm.State
		conditions int
	}{
		"LongestStateNames": {
			reason: "two states of 316 bytes, in state, history and conditions",
			machine: fsm.New[*gadget]("longest-names", fsm.Pipeline).
				Initial(named(fsm.MaxStateName, 'A')).
				State(named(fsm.MaxStateName, 'A'), next(named(fsm.MaxStateName, 'B')), fsm.To(named(fsm.MaxStateName, 'B'))).
				State(named(fsm.MaxStateName, 'B'), done, fsm.Final()),
			state: named(fsm.MaxStateName, 'B'), conditions: 1 + 2,
		},
		"LargestPipeline": {
			reason:  "a condition per state besides Ready",
			machine: chain("largest-pipeline", fsm.Pipeline, fsm.MaxPipelineStates),
			state:   fsm.State(fmt.Sprintf("S%d", fsm.MaxPipelineStates)), conditions: 1 + fsm.MaxPipelineStates,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			r := e.reconciler(tc.machine)
			e.gadget("g", v1alpha1.GadgetSpec{})
			e.reconcile(r, "g") // fails the test if the status cannot be written
			g := e.get("g")
			if g.Status.State != tc.state || len(g.Status.Conditions) != tc.conditions {
				t.Errorf("%s: state %.20q… with %d conditions, want %.20q… with %d", tc.reason, g.Status.State, len(g.Status.Conditions), tc.state, tc.conditions)
			}
			wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
		})
	}
}

// A child that status.outputs cannot record is refused before it is
// applied: the handler fails with an OutputLimitError, and the status
// stays one that the API server takes.
func TestApplyRefusesAChildThatTheOutputsCannotRecord(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("outputs-limit", fsm.Lifecycle).
		Initial("Apply").
		State("Apply", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Spec.Mode}}
			return failOr(r.Apply(ctx, cm), fsm.Done())
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	long := strings.Repeat("n", fsm.MaxName+1)
	e.gadget("g", v1alpha1.GadgetSpec{Mode: long})

	wantRefused := func(field string, limit int, name string) {
		t.Helper()
		f := e.fail(r)
		var lerr *fsm.OutputLimitError
		if !errors.As(f, &lerr) || lerr.Field != field || lerr.Limit != limit {
			t.Fatalf("the handler failed with %v, want an OutputLimitError on %s at %d", f, field, limit)
		}
		wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonOutputLimit)
		if e.exists(&corev1.ConfigMap{}, name) {
			t.Errorf("ConfigMap %.20s… was applied, though it could not be recorded", name)
		}
	}
	wantRefused("name", fsm.MaxName, long)

	// An object with as many children as the outputs record, one of them
	// "kept": applying that one again is fine, a new one is refused.
	g := e.get("g")
	g.Status.Outputs = nil
	for i := range fsm.MaxOutputs - 1 {
		g.Status.Outputs = append(g.Status.Outputs, fsm.OutputRef{Kind: "ConfigMap", Namespace: e.namespace, Name: fmt.Sprintf("c%03d", i)})
	}
	g.Status.Outputs = append(g.Status.Outputs, fsm.OutputRef{Kind: "ConfigMap", Namespace: e.namespace, Name: "kept"})
	if err := e.direct.Status().Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "kept" })
	e.reconcile(r, "g")
	if g := e.get("g"); len(g.Status.Outputs) != fsm.MaxOutputs || !e.exists(&corev1.ConfigMap{}, "kept") {
		t.Fatalf("applying a recorded child: %d outputs, want %d and ConfigMap kept applied", len(g.Status.Outputs), fsm.MaxOutputs)
	}
	wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)

	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "new" })
	wantRefused("outputs", fsm.MaxOutputs, "new")
	if n := len(e.get("g").Status.Outputs); n != fsm.MaxOutputs {
		t.Errorf("%d outputs after the refusal, want %d", n, fsm.MaxOutputs)
	}
}

// A retry annotation longer than status.lastHandledRetry holds is
// recorded as its digest, and acted on once.
func TestALongRetryAnnotationIsRecordedAsItsDigest(t *testing.T) {
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("long-retry", fsm.Lifecycle).
		Initial("Work").
		State("Work", counted(&calls, func(context.Context, *request) fsm.Result {
			return fsm.Stop("DependencyMissing", "the database is not there")
		}), fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")

	asked := strings.Repeat("r", fsm.MaxRetryMark+1)
	g := e.get("g")
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, fsm.AnnotationRetry, asked)
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "g")
	e.reconcile(r, "g")
	sum := sha256.Sum256([]byte(asked))
	if got, want := e.get("g").Status.LastHandledRetry, "sha256:"+hex.EncodeToString(sum[:]); got != want || calls.count() != 2 {
		t.Errorf("lastHandledRetry %q after %d runs, want %q after 2: one retry, recorded as the digest", got, calls.count(), want)
	}
}

// maximalStatus is the largest status that the CRD takes: every list of
// Status as long as its bound, and every string as long as its bound,
// except the messages of conditions, which are metav1.Condition's. kfsm
// quotes at most 1024 bytes of an error in a message, after a few words;
// 2048 bytes is more than it writes. (metav1.Condition's own bound, 32768,
// times 64 conditions is more than the API server takes in one request.)
func maximalStatus(gen int64) fsm.Status {
	now := metav1.Now()
	s := func(n int) string { return strings.Repeat("x", n) }
	state := fsm.State(s(fsm.MaxStateName))
	reason := strings.Repeat("R", 1024)
	st := fsm.Status{
		ObservedGeneration: gen,
		State:              state,
		StateSince:         &now,
		Failures:           1 << 30,
		RetryAt:            &metav1.MicroTime{Time: now.Time},
		LastHandledRetry:   s(fsm.MaxRetryMark),
	}
	for i := range fsm.MaxConditions {
		st.Conditions = append(st.Conditions, metav1.Condition{
			Type:   fmt.Sprintf("%s/%s%02d", s(fsm.MaxStateName-64), strings.Repeat("N", 61), i),
			Status: metav1.ConditionFalse, Reason: reason, Message: s(2048),
			ObservedGeneration: gen, LastTransitionTime: now,
		})
	}
	for range fsm.MaxHistory {
		st.History = append(st.History, fsm.Transition{From: state, To: state, Reason: reason, Time: now})
	}
	for i := range fsm.MaxOutputs {
		st.Outputs = append(st.Outputs, fsm.OutputRef{
			Group: s(fsm.MaxGroup), Kind: s(fsm.MaxKind), Namespace: s(fsm.MaxNamespace),
			Name: fmt.Sprintf("%03d", i) + s(fsm.MaxName-3), State: state, UID: types.UID(s(fsm.MaxUID)),
			Adopted: ptr.To(true), AppliedDigest: s(64), ResourceVersion: s(fsm.MaxVersion),
		})
	}
	return st
}

// The generated CRD takes the largest status, and refuses one that passes
// any bound by one: the numbers in its schema are those kfsm keeps to.
func TestTheCRDTakesTheLargestStatusAndNoLarger(t *testing.T) {
	e := newEnv(t)
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	g.Status.Status = maximalStatus(g.Generation)
	if err := e.direct.Status().Update(t.Context(), g); err != nil {
		t.Fatalf("the largest status was refused: %.2000v", err)
	}

	cases := map[string]struct {
		change func(*fsm.Status)
		field  string
	}{
		"ConditionsOneTooMany": {
			change: func(st *fsm.Status) {
				c := st.Conditions[0]
				c.Type = "Extra"
				st.Conditions = append(st.Conditions, c)
			},
			field: "status.conditions",
		},
		"HistoryOneTooMany":              {change: func(st *fsm.Status) { st.History = append(st.History, st.History[0]) }, field: "status.history"},
		"OutputsOneTooMany":              {change: func(st *fsm.Status) { st.Outputs = append(st.Outputs, st.Outputs[0]) }, field: "status.outputs"},
		"StateOneByteTooLong":            {change: func(st *fsm.Status) { st.State += "x" }, field: "status.state"},
		"TransitionToOneByteTooLong":     {change: func(st *fsm.Status) { st.History[0].To += "x" }, field: "status.history[0].to"},
		"TransitionReasonOneByteTooLong": {change: func(st *fsm.Status) { st.History[0].Reason += "R" }, field: "status.history[0].reason"},
		"OutputNameOneByteTooLong":       {change: func(st *fsm.Status) { st.Outputs[0].Name += "x" }, field: "status.outputs[0].name"},
		"OutputKindOneByteTooLong":       {change: func(st *fsm.Status) { st.Outputs[0].Kind += "x" }, field: "status.outputs[0].kind"},
		"OutputUIDOneByteTooLong":        {change: func(st *fsm.Status) { st.Outputs[0].UID += "x" }, field: "status.outputs[0].uid"},
		"LastHandledRetryOneByteTooLong": {change: func(st *fsm.Status) { st.LastHandledRetry += "x" }, field: "status.lastHandledRetry"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			past := g.DeepCopy()
			tc.change(&past.Status.Status)
			err := e.direct.Status().Update(t.Context(), past)
			var status apierrors.APIStatus
			if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
				t.Fatalf("Update() = %.300v, want the status refused as invalid", err)
			}
			var fields []string
			for _, c := range status.Status().Details.Causes {
				fields = append(fields, c.Field)
			}
			if !strings.Contains(strings.Join(fields, " "), tc.field) {
				t.Errorf("the refusal names fields %v, want %s", fields, tc.field)
			}
		})
	}
}
