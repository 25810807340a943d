package dashboard

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
)

// query is what the search box asks for: every term must match. A plain
// word is part of an object's namespace/name; state:, ns: (namespace:),
// cond: and machine: match exactly, without regard to case. cond:Type asks
// for the condition to be True, cond:Type=False or =Unknown for that.
type query struct {
	words, states, namespaces, machines []string
	conditions                          []conditionTerm
}

type conditionTerm struct{ kind, status string }

// parseQuery reads a search; it names the first term it cannot read.
func parseQuery(s string) (query, error) {
	var q query
	for _, term := range strings.Fields(s) {
		key, value, filter := strings.Cut(term, ":")
		if !filter {
			q.words = append(q.words, strings.ToLower(term))
			continue
		}
		if value == "" {
			return query{}, fmt.Errorf("%q names no value after the colon", term)
		}
		switch strings.ToLower(key) {
		case "state":
			q.states = append(q.states, value)
		case "ns", "namespace":
			q.namespaces = append(q.namespaces, value)
		case "machine":
			q.machines = append(q.machines, value)
		case "cond", "condition":
			kind, status, _ := strings.Cut(value, "=")
			if status == "" {
				status = string(metav1.ConditionTrue)
			}
			q.conditions = append(q.conditions, conditionTerm{kind, status})
		default:
			return query{}, fmt.Errorf("%q is no filter: use state:, ns:, cond: or machine:, or a plain word for a name", key+":")
		}
	}
	return q, nil
}

// anyFold tells whether s equals one of values, without regard to case;
// no values matches every s.
func anyFold(values []string, s string) bool {
	for _, v := range values {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return len(values) == 0
}

func (q query) matchesMachine(key string) bool { return anyFold(q.machines, key) }

func (q query) matches(o inspect.Object) bool {
	if !anyFold(q.states, string(o.Status.State)) || !anyFold(q.namespaces, o.Namespace) {
		return false
	}
	name := strings.ToLower(o.Namespace + "/" + o.Name)
	for _, w := range q.words {
		if !strings.Contains(name, w) {
			return false
		}
	}
	for _, c := range q.conditions {
		found := false
		for _, have := range o.Status.Conditions {
			found = found || strings.EqualFold(have.Type, c.kind) && strings.EqualFold(string(have.Status), c.status)
		}
		if !found {
			return false
		}
	}
	return true
}

// searchView lists the objects that a search finds, in every machine.
type searchView struct {
	Query, Error string
	Machines     int // how many machines have a match
	Rows         []searchRow
	More         int
}

type searchRow struct {
	objectRow
	Machine, State, StateHref string
}

func (d *Dashboard) serveSearch(w http.ResponseWriter, r *http.Request) {
	v := searchView{Query: r.URL.Query().Get("q")}
	q, err := parseQuery(v.Query)
	if err != nil {
		v.Error = err.Error()
		d.render(w, "search", v)
		return
	}
	d.mu.Lock()
	machines := d.machines
	d.mu.Unlock()
	now := time.Now()
	for _, m := range machines {
		if !q.matchesMachine(m.key) {
			continue
		}
		found := false
		for _, o := range m.sorted() {
			if !q.matches(o) {
				continue
			}
			found = true
			if len(v.Rows) == maxRows {
				v.More++
				continue
			}
			v.Rows = append(v.Rows, searchRow{
				objectRow: row(m, o, now), Machine: m.key,
				State: string(o.Status.State), StateHref: stateHref(m.key, o.Status.State),
			})
		}
		if found {
			v.Machines++
		}
	}
	d.render(w, "search", v)
}

// row is an object as a list shows it.
func row(m *watched, o inspect.Object, now time.Time) objectRow {
	r := objectRow{Namespace: o.Namespace, Name: o.Name, Href: objectHref(m.key, o), Ready: "—", Notes: notes(m.Machine, o)}
	if c := o.Condition(fsm.ConditionReady); c != nil {
		r.Ready, r.ReadyReason = string(c.Status), c.Reason
	}
	if o.Status.StateSince != nil {
		r.For = shortDuration(now.Sub(o.Status.StateSince.Time))
	}
	return r
}
