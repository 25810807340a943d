package graph

import (
	"encoding/json"
	"fmt"
	"time"
)

// ParseJSON reads back a graph that JSON wrote, so that a graph kept in a
// file (a coverage profile, a golden file) can be drawn and checked again.
// The graph is not validated: an invalid graph can be exported, so it can be
// read back; call Validate to check it.
//
// Caveats: a Retries without To draws no edge, so JSON does not carry it and
// the graph read back has no Retries for that state. The deletionPath flag
// of the states is derived from the edges and ignored here. A graph that
// declares a state twice cannot be read back, because its edges could belong
// to either declaration.
func ParseJSON(data []byte) (*Graph, error) {
	var in struct {
		Name    string `json:"name"`
		Mode    string `json:"mode"`
		Version int    `json:"version"`
		States  []struct {
			Name     State `json:"name"`
			Initial  bool  `json:"initial"`
			Final    bool  `json:"final"`
			OnDelete bool  `json:"onDelete"`
		} `json:"states"`
		Edges []struct {
			From     State  `json:"from"`
			To       State  `json:"to"`
			Kind     string `json:"kind"`
			Priority int    `json:"priority"`
			After    string `json:"after"`
			Limit    int    `json:"limit"`
		} `json:"edges"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("graph JSON: %w", err)
	}
	g := &Graph{Name: in.Name, Version: in.Version}
	switch in.Mode {
	case Lifecycle.String():
		g.Mode = Lifecycle
	case Pipeline.String():
		g.Mode = Pipeline
	default:
		return nil, fmt.Errorf("graph JSON: unknown mode %q, want %q or %q", in.Mode, Lifecycle, Pipeline)
	}
	index := make(map[State]int, len(in.States))
	for i, s := range in.States {
		if _, dup := index[s.Name]; dup {
			return nil, fmt.Errorf("graph JSON: state %q is declared twice", s.Name)
		}
		index[s.Name] = i
		g.States = append(g.States, StateSpec{Name: s.Name, Initial: s.Initial, Final: s.Final, OnDelete: s.OnDelete})
	}
	for i, e := range in.Edges {
		at, ok := index[e.From]
		if !ok {
			return nil, fmt.Errorf("graph JSON: edge %d (%s→%s) leaves %q, which is not a declared state", i, e.From, e.To, e.From)
		}
		s := &g.States[at]
		switch e.Kind {
		case Exit.String():
			// The priority is the exit's position, so a priority that
			// disagrees with the order means the file was edited by hand.
			if e.Priority != 0 && e.Priority != len(s.Exits)+1 {
				return nil, fmt.Errorf("graph JSON: exit %s→%s has priority %d but is exit %d of %s", e.From, e.To, e.Priority, len(s.Exits)+1, e.From)
			}
			s.Exits = append(s.Exits, e.To)
		case TimeoutExit.String():
			if s.Timeout != nil {
				return nil, fmt.Errorf("graph JSON: state %s has two timeout edges", e.From)
			}
			after, err := time.ParseDuration(e.After)
			if err != nil {
				return nil, fmt.Errorf("graph JSON: timeout edge %s→%s: bad duration: %w", e.From, e.To, err)
			}
			s.Timeout = &Timeout{After: after, To: e.To}
		case RetriesExit.String():
			if s.Retries != nil {
				return nil, fmt.Errorf("graph JSON: state %s has two retries edges", e.From)
			}
			s.Retries = &Retries{Limit: e.Limit, To: e.To}
		default:
			return nil, fmt.Errorf("graph JSON: edge %s→%s has unknown kind %q", e.From, e.To, e.Kind)
		}
	}
	return g, nil
}
