package argocd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/integrations/argocd"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}

// health is what an Argo CD health check returns.
type health struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// argoHealth runs script on obj as Argo CD runs a custom health check: a
// Lua state with only the package, base and table libraries (Argo CD also
// offers a reduced os library, which the script does not use), obj as a
// global made of Lua tables, the script run as a chunk, and the table it
// returns read as a health status that Argo CD must know.
func argoHealth(script string, obj map[string]any) (health, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return health{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, obj))
	if err := l.DoString(script); err != nil {
		return health{}, err
	}
	hs, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return health{}, fmt.Errorf("the script returned a %s, want a table", l.Get(-1).Type())
	}
	var out health
	for field, into := range map[string]*string{"status": &out.Status, "message": &out.Message} {
		switch v := hs.RawGetString(field).(type) {
		case lua.LString:
			*into = string(v)
		case *lua.LNilType:
		default:
			return health{}, fmt.Errorf("hs.%s is a %s, want a string", field, v.Type())
		}
	}
	switch out.Status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
		return out, nil
	}
	return health{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
}

// luaValue converts a value of an object decoded from JSON as Argo CD
// does: objects become tables with string keys, arrays tables with keys
// 1 to n, numbers, strings and booleans their Lua values, and null nil.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case json.Number:
		return lua.LString(v)
	case string:
		return lua.LString(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(luaValue(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for key, item := range v {
			t.RawSetH(lua.LString(key), luaValue(l, item))
		}
		return t
	}
	return lua.LNil
}

// argoFor is the health that the script promises for each kstatus
// answer.
var argoFor = map[status.Status]string{
	status.CurrentStatus:     "Healthy",
	status.InProgressStatus:  "Progressing",
	status.FailedStatus:      "Degraded",
	status.TerminatingStatus: "Progressing",
}

// want is what kstatus and the script must make of an object.
type want struct {
	kstatus status.Status
	health  string
	// message is a part of the script's message: the reason that it
	// reports.
	message string
	// kfsmOnly says why the script departs from argoFor on this object;
	// empty when it does not.
	kfsmOnly string
}

// judge compares what script and kstatus make of obj with w, and lists
// every difference.
func judge(script string, obj *unstructured.Unstructured, w want) []string {
	var problems []string
	res, err := status.Compute(obj)
	if err != nil {
		return []string{fmt.Sprintf("kstatus: %v", err)}
	}
	got, err := argoHealth(script, obj.Object)
	if err != nil {
		return []string{fmt.Sprintf("health.lua: %v", err)}
	}
	if res.Status != w.kstatus {
		problems = append(problems, fmt.Sprintf("kstatus = %s (%q), want %s", res.Status, res.Message, w.kstatus))
	}
	if got.Status != w.health {
		problems = append(problems, fmt.Sprintf("health = %s (%q), want %s", got.Status, got.Message, w.health))
	}
	if w.kfsmOnly == "" && got.Status != argoFor[res.Status] {
		problems = append(problems, fmt.Sprintf("health = %s, but kstatus %s maps to %s", got.Status, res.Status, argoFor[res.Status]))
	}
	if w.kfsmOnly != "" && got.Status == argoFor[res.Status] {
		problems = append(problems, fmt.Sprintf("health = %s, as kstatus %s maps to, but it should differ: %s", got.Status, res.Status, w.kfsmOnly))
	}
	if !strings.Contains(got.Message, w.message) {
		problems = append(problems, fmt.Sprintf("message %q, want it to contain %q", got.Message, w.message))
	}
	return problems
}

type request = fsm.Request[*v1alpha1.Gadget]

// The states of the test machines.
const (
	Start    fsm.State = "Start"
	Serving  fsm.State = "Serving"
	Cleanup  fsm.State = "Cleanup"
	Released fsm.State = "Released"

	Configured fsm.State = "Configured"
	Deployed   fsm.State = "Deployed"
)

// lifecycle is a machine whose gadget's spec.mode chooses what Start
// does: wait, fail, panic, stop, take an undeclared exit, or move on to
// Serving, where it is done. On deletion, Cleanup waits for mode "hold"
// and fails for "fail-cleanup".
func lifecycle(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("health", fsm.Lifecycle).
		Initial(Start).
		State(Start, func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "wait":
				return fsm.Wait(time.Hour, "WaitingForTarget")
			case "fail":
				return fsm.Fail(errors.New("the disk is full"))
			case "panic":
				panic("the index is out of range")
			case "stop":
				return fsm.Stop("BrokenSpec", "mode stop cannot be served")
			case "illegal":
				return fsm.Next("Nowhere")
			}
			return fsm.Next(Serving)
		}, fsm.To(Serving), fsm.Retries(2)).
		State(Serving, func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.Final()).
		OnDelete(Cleanup).
		State(Cleanup, func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "hold":
				return fsm.Wait(time.Hour, "WaitingForBackup")
			case "fail-cleanup":
				return fsm.Fail(errors.New("the backup server is down"))
			}
			return fsm.Next(Released)
		}, fsm.To(Released)).
		State(Released, nil, fsm.Final()).
		WithClock(e.Clock)
}

// pipeline is a machine whose states are also conditions: Deployed waits
// for spec.target and stops for mode "stop".
func pipeline(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("health-pipeline", fsm.Pipeline).
		Initial(Configured).
		State(Configured, func(context.Context, *request) fsm.Result { return fsm.Next(Deployed) }, fsm.To(Deployed)).
		State(Deployed, func(_ context.Context, r *request) fsm.Result {
			switch {
			case r.Object.Spec.Mode == "stop":
				return fsm.Stop("BadImage", "the image cannot be pulled")
			case r.Object.Spec.Target < 1:
				return fsm.Wait(time.Minute, "WaitingForReplicas")
			}
			return fsm.Next(Serving)
		}, fsm.To(Serving)).
		State(Serving, nil, fsm.Final()).
		WithClock(e.Clock)
}

// scene is one case's namespace and machine, and the gadget "g" that
// the case drives.
type scene struct {
	e *fsmtest.Env
	s *fsmtest.Stepper[*v1alpha1.Gadget]
	g *v1alpha1.Gadget
}

// create makes gadget "g" with the given mode and target.
func (s *scene) create(mode string, target int32) {
	s.g = &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: v1alpha1.GadgetSpec{Mode: mode, Target: target}}
	s.e.Create(s.g)
}

// settle reconciles g until the machine waits for time or a change.
func (s *scene) settle() { s.s.Settle(s.g) }

func (s *scene) pause() {
	s.e.Update(s.g, func() { s.g.SetAnnotations(map[string]string{fsm.AnnotationPaused: "true"}) })
}

// read returns g as the API server serves it to any client: decoded
// from JSON into an unstructured object.
func (s *scene) read() *unstructured.Unstructured {
	s.e.T.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Gadget"))
	if err := s.e.Client.Get(s.e.T.Context(), client.ObjectKey{Namespace: s.e.Namespace, Name: "g"}, u); err != nil {
		s.e.T.Fatal(err)
	}
	return u
}

// observed is an object that a case made, with what must be made of it.
type observed struct {
	obj  *unstructured.Unstructured
	want want
}

// Argo CD and kstatus agree on kfsm objects in every kind of state, made
// by real machines against the API server, except where the script knows
// kfsm better: pause, and an object that kfsm has not yet reconciled.
func TestHealthAgreesWithKstatus(t *testing.T) {
	const (
		paused     = "kstatus ignores kfsm.dev/paused and the Paused condition"
		unobserved = "kstatus cannot tell that no status means not yet reconciled"
	)
	cases := []struct {
		name     string
		pipeline bool
		build    func(s *scene)
		want     want
	}{
		{
			name:  "NotYetReconciled",
			build: func(s *scene) { s.create("", 0) },
			want:  want{kstatus: status.CurrentStatus, health: "Progressing", message: "Waiting for the operator", kfsmOnly: unobserved},
		},
		{
			name:  "Converged",
			build: func(s *scene) { s.create("", 0); s.settle() },
			want:  want{kstatus: status.CurrentStatus, health: "Healthy", message: fsm.ReasonDone},
		},
		{
			name:  "Waiting",
			build: func(s *scene) { s.create("wait", 0); s.settle() },
			want:  want{kstatus: status.InProgressStatus, health: "Progressing", message: "WaitingForTarget"},
		},
		{
			name:  "FailingWithBackoff",
			build: func(s *scene) { s.create("fail", 0); s.settle() },
			want:  want{kstatus: status.InProgressStatus, health: "Progressing", message: fsm.ReasonHandlerFailed + ": state Start failed: the disk is full"},
		},
		{
			name:  "Panicked",
			build: func(s *scene) { s.create("panic", 0); s.settle() },
			want:  want{kstatus: status.InProgressStatus, health: "Progressing", message: "the index is out of range"},
		},
		{
			name: "RetriesExhausted",
			build: func(s *scene) {
				s.create("fail", 0)
				s.settle()
				s.e.Clock.Step(time.Second)
				s.settle()
			},
			want: want{kstatus: status.FailedStatus, health: "Degraded", message: fsm.ReasonRetriesExhausted},
		},
		{
			name:  "Stopped",
			build: func(s *scene) { s.create("stop", 0); s.settle() },
			want:  want{kstatus: status.FailedStatus, health: "Degraded", message: "BrokenSpec: mode stop cannot be served"},
		},
		{
			name:  "IllegalTransition",
			build: func(s *scene) { s.create("illegal", 0); s.settle() },
			want:  want{kstatus: status.FailedStatus, health: "Degraded", message: fsm.ReasonIllegalTransition},
		},
		{
			name: "SpecChangedOnAConvergedObject",
			build: func(s *scene) {
				s.create("", 0)
				s.settle()
				s.e.Update(s.g, func() { s.g.Spec.Target = 2 })
			},
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Generation 2 not yet observed"},
		},
		{
			name: "SpecFixedOnAStalledObject",
			build: func(s *scene) {
				s.create("stop", 0)
				s.settle()
				s.e.Update(s.g, func() { s.g.Spec.Mode = "" })
			},
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Generation 2 not yet observed"},
		},
		{
			name: "DeletingBeforeTheOperatorSawIt",
			build: func(s *scene) {
				s.create("hold", 0)
				s.settle()
				s.e.Delete(s.g)
			},
			want: want{kstatus: status.TerminatingStatus, health: "Progressing", message: "Deleting: " + fsm.ReasonDone},
		},
		{
			name: "DeletingWhileTheFinalizerIsHeld",
			build: func(s *scene) {
				s.create("hold", 0)
				s.settle()
				s.e.Delete(s.g)
				s.settle()
			},
			want: want{kstatus: status.TerminatingStatus, health: "Progressing", message: "Deleting: WaitingForBackup"},
		},
		{
			name: "DeletingWhileCleanupFails",
			build: func(s *scene) {
				s.create("fail-cleanup", 0)
				s.settle()
				s.e.Delete(s.g)
				s.settle()
			},
			want: want{kstatus: status.TerminatingStatus, health: "Progressing", message: "the backup server is down"},
		},
		{
			name: "PausedWhenConverged",
			build: func(s *scene) {
				s.create("", 0)
				s.settle()
				s.pause()
				s.settle()
			},
			want: want{kstatus: status.CurrentStatus, health: "Suspended", message: "Paused", kfsmOnly: paused},
		},
		{
			name: "PausedBeforeTheOperatorSawIt",
			build: func(s *scene) {
				s.create("wait", 0)
				s.settle()
				s.pause()
			},
			want: want{kstatus: status.InProgressStatus, health: "Suspended", message: "Paused", kfsmOnly: paused},
		},
		{
			name: "PausedWhenStalled",
			build: func(s *scene) {
				s.create("stop", 0)
				s.settle()
				s.pause()
				s.settle()
			},
			want: want{kstatus: status.FailedStatus, health: "Suspended", message: "Paused", kfsmOnly: paused},
		},
		{
			name: "PausedWhileDeleting",
			build: func(s *scene) {
				s.create("hold", 0)
				s.settle()
				s.pause()
				s.settle()
				s.e.Delete(s.g)
				s.settle()
			},
			want: want{kstatus: status.TerminatingStatus, health: "Progressing", message: "Deleting, paused"},
		},
		{
			name: "Resumed",
			build: func(s *scene) {
				s.create("", 0)
				s.settle()
				s.pause()
				s.settle()
				s.e.Update(s.g, func() { s.g.SetAnnotations(nil) })
				s.settle()
			},
			want: want{kstatus: status.CurrentStatus, health: "Healthy", message: fsm.ReasonDone},
		},
		{
			name:     "PipelineConverged",
			pipeline: true,
			build:    func(s *scene) { s.create("", 1); s.settle() },
			want:     want{kstatus: status.CurrentStatus, health: "Healthy", message: fsm.ReasonDone},
		},
		{
			name:     "PipelineWaiting",
			pipeline: true,
			build:    func(s *scene) { s.create("", 0); s.settle() },
			want:     want{kstatus: status.InProgressStatus, health: "Progressing", message: "WaitingForReplicas"},
		},
		{
			name:     "PipelineStalled",
			pipeline: true,
			build:    func(s *scene) { s.create("stop", 1); s.settle() },
			want:     want{kstatus: status.FailedStatus, health: "Degraded", message: "BadImage: the image cannot be pulled"},
		},
	}

	var all []observed
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := fsmtest.New(t)
			m := lifecycle(e)
			if tc.pipeline {
				m = pipeline(e)
			}
			s := &scene{e: e, s: fsmtest.Steps(e, m)}
			tc.build(s)
			obj := s.read()
			if got, err := argoHealth(argocd.HealthLua, obj.Object); err == nil {
				t.Logf("%s: %s", got.Status, got.Message)
			}
			for _, p := range judge(argocd.HealthLua, obj, tc.want) {
				t.Error(p)
			}
			all = append(all, observed{obj: obj, want: tc.want})
		})
	}

	// The comparison above must catch a wrong script: each of these
	// mistakes must fail it on some of the same objects.
	mistakes := map[string]struct{ from, to string }{
		"HealthyAndProgressingSwapped": {`"Healthy"`, `"Progressing"`}, // and back, below
		"StalledReadAsProgressing":     {`hs.status = "Degraded"`, `hs.status = "Progressing"`},
		"PauseIgnored":                 {`local paused = annotations["kfsm.dev/paused"] == "true"`, `local paused = false`},
		"GenerationNotCompared":        {`metadata.generation ~= status.observedGeneration`, `false`},
		"DeletionNotChecked":           {`metadata.deletionTimestamp ~= nil and`, `false and`},
		"NotReconciledReadAsHealthy":   {`if status.observedGeneration == nil then`, `if false then`},
		"ReconcilingReadAsHealthy":     {`hs.status = "Progressing"` + "\n    if ready ~= nil then", `hs.status = "Healthy"` + "\n    if ready ~= nil then"},
	}
	t.Run("MistakesAreCaught", func(t *testing.T) {
		if len(all) != len(cases) {
			t.Skip("some cases did not run")
		}
		for name, m := range mistakes {
			if !strings.Contains(argocd.HealthLua, m.from) {
				t.Errorf("%s: health.lua has no %q to change", name, m.from)
				continue
			}
			script := strings.ReplaceAll(argocd.HealthLua, m.from, m.to)
			if name == "HealthyAndProgressingSwapped" {
				script = strings.ReplaceAll(argocd.HealthLua, `"Healthy"`, `"@"`)
				script = strings.ReplaceAll(script, `"Progressing"`, `"Healthy"`)
				script = strings.ReplaceAll(script, `"@"`, `"Progressing"`)
			}
			caught := 0
			for _, o := range all {
				if len(judge(script, o.obj, o.want)) > 0 {
					caught++
				}
			}
			if caught == 0 {
				t.Errorf("%s: no object tells the mistaken script from the real one", name)
			}
		}
	})
}

// Statuses that kfsm does not write but that a kind's history or another
// writer may leave: the script still agrees with kstatus on them.
func TestHealthAgreesWithKstatusOnHandWrittenStatus(t *testing.T) {
	cases := map[string]struct {
		reason string
		object string
		want   want
	}{
		"ReadyUnknown": {
			reason: "kstatus reads Ready Unknown as InProgress.",
			object: `{"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
				{"type": "Ready", "status": "Unknown", "reason": "Starting"}]}}`,
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Starting"},
		},
		"ReadyFalseAlone": {
			reason: "Without Reconciling or Stalled, Ready False is InProgress.",
			object: `{"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
				{"type": "Ready", "status": "False", "reason": "Degrading", "message": "one replica"}]}}`,
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Degrading: one replica"},
		},
		"ReconcilingWithoutReady": {
			reason: "The message falls back on Reconciling's own.",
			object: `{"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
				{"type": "Reconciling", "status": "True", "reason": "Walking"}]}}`,
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Walking"},
		},
		"StalledBeforeReconciling": {
			reason: "When both are True, the first in the list decides, as in kstatus.",
			object: `{"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
				{"type": "Stalled", "status": "True", "reason": "Broken"},
				{"type": "Reconciling", "status": "True", "reason": "Walking"}]}}`,
			want: want{kstatus: status.FailedStatus, health: "Degraded", message: "Broken"},
		},
		"ObservedWithoutConditions": {
			reason: "No condition at all is Current.",
			object: `{"metadata": {"generation": 3}, "status": {"observedGeneration": 3}}`,
			want:   want{kstatus: status.CurrentStatus, health: "Healthy"},
		},
		"ObservedGenerationAhead": {
			reason: "kstatus compares the generations for equality, not order.",
			object: `{"metadata": {"generation": 2}, "status": {"observedGeneration": 3, "conditions": [
				{"type": "Ready", "status": "True", "reason": "Done"}]}}`,
			want: want{kstatus: status.InProgressStatus, health: "Progressing", message: "Generation 2 not yet observed"},
		},
		"PausedFalse": {
			reason: "Only \"true\" pauses.",
			object: `{"metadata": {"generation": 1, "annotations": {"kfsm.dev/paused": "false"}}, "status": {"observedGeneration": 1, "conditions": [
				{"type": "Ready", "status": "True", "reason": "Done"}]}}`,
			want: want{kstatus: status.CurrentStatus, health: "Healthy", message: "Done"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON([]byte(`{"apiVersion": "example.com/v1", "kind": "Moose", ` + strings.TrimPrefix(tc.object, "{"))); err != nil {
				t.Fatal(err)
			}
			for _, p := range judge(argocd.HealthLua, obj, tc.want) {
				t.Errorf("%s\n%s", tc.reason, p)
			}
		})
	}
}

// The Lua state of these tests lacks the string library, as Argo CD's
// does: a script that used it would fail here as it fails there.
func TestTheSandboxHasNoStringLibrary(t *testing.T) {
	_, err := argoHealth(`return {status = string.lower("HEALTHY")}`, map[string]any{})
	var lerr *lua.ApiError
	if !errors.As(err, &lerr) {
		t.Errorf("a script calling string.lower = %v, want a Lua error", err)
	}
}
