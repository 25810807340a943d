package explore

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A relist breaks its watch at its event, which is lost with those after
// it; the next watch is answered 410 Gone once, and the operator counts
// as busy until its cache listed anew.
func TestARelistBreaksTheWatchAndAnswersGoneOnce(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"name":"a"}}}
{"type":"MODIFIED","object":{"metadata":{"name":"a"}}}
{"type":"MODIFIED","object":{"metadata":{"name":"b"}}}
`)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"ConfigMapList","items":[]}`)
	}))
	defer api.Close()
	relist := Atom{Kind: Relist, N: 2, Res: "configmaps"}
	tr := NewTracker(World{Namespace: "ns"}, false)
	f := Scheduled(Schedule{relist}, 0, tr)
	get := func(query string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, api.URL+"/api/v1/namespaces/ns/configmaps"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := f.Watch(api.Client().Transport, req, "configmaps")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, string(body)
	}

	if _, body := get("?watch=true"); strings.Count(body, "\n") != 1 || !strings.Contains(body, "ADDED") {
		t.Errorf("the broken watch delivered %q; want its first event alone", body)
	}
	if tr.IdleFor(time.Now()) != 0 {
		t.Errorf("the operator counts as quiet while its cache has yet to list anew")
	}
	if code, body := get("?watch=true"); code != http.StatusGone || !strings.Contains(body, "Expired") {
		t.Errorf("the next watch got %d %q; want 410 Gone, reason Expired", code, body)
	}
	if code, _ := get(""); code != http.StatusOK {
		t.Errorf("the list got %d", code)
	}
	if tr.IdleFor(time.Now().Add(time.Second)) == 0 {
		t.Errorf("the operator still counts as busy once its cache listed anew")
	}
	if code, body := get("?watch=true"); code != http.StatusOK || strings.Count(body, "\n") != 3 {
		t.Errorf("the watch after the list got %d %q; want its three events: Gone is answered once", code, body)
	}
	if _, struck := tr.Result(); struck[relist] != 2 {
		t.Errorf("the relist struck at point %d, want 2: the watch's second event", struck[relist])
	}
}

// A schedule's action faults strike the action start or end they name,
// counted across the run, and the tracker records each as a point.
func TestAnActionFaultStrikesItsStartOrEnd(t *testing.T) {
	tr := NewTracker(World{Namespace: "ns"}, false)
	f := Scheduled(Schedule{{Kind: ActionEnd, N: 2}}, 0, tr)
	var died []bool
	for _, end := range []bool{false, true, false, true} {
		died = append(died, f.Action(end, types.NamespacedName{Namespace: "ns", Name: "db"}, "provision"))
	}
	if want := []bool{false, false, false, true}; !slices.Equal(died, want) {
		t.Errorf("the process died at %v of start, end, start, end; want %v: the second end", died, want)
	}
	if points, _ := tr.Result(); len(points) != 4 || points[3].What != "provision of db" {
		t.Errorf("points %+v; want four, the last the action's", points)
	}
}
