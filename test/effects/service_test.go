//go:build linux

package effects_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The service's crash points: at the first charge it receives, it has
// the operator killed before it applies the charge, or after it applied
// it and before it answers.
const (
	beforeEffect = "before-effect"
	afterEffect  = "after-effect"
)

// The service's lost answers: the first charge it receives is applied,
// and then answered 500, or not answered until its caller gives up.
const (
	lostAnswer = "lost-answer"
	timeout    = "timeout"
)

// service is the payment service that the operator charges: the outside
// system whose effects the test counts. Every charge it applies is an
// effect, whether or not its caller is still there to hear the answer.
type service struct {
	t   *testing.T
	srv *httptest.Server
	// keys: a charge under a key already seen is the first one again,
	// and no new effect.
	keys bool

	mu       sync.Mutex
	effects  []effect
	byKey    map[string]effect
	posts    map[string]int // charges asked for, by order
	received int            // charges asked for, in all
	inflight int            // requests being served
	lastSeen time.Time      // when the last request arrived
	// crash is the point at which the first charge has the operator
	// killed, by kill, which returns once it is dead; or the way its
	// answer is lost, lostAnswer or timeout.
	crash string
	kill  func()
	// firstPost is closed when the first charge arrives, of firstOrder.
	firstPost  chan struct{}
	firstOrder string
	// delay has each charge answered after up to 200 ms, so that a kill
	// lands while calls are open.
	delay bool
	// held, while open, holds every charge, applied, until release.
	held chan struct{}
	// unsure has the first question about each order's charges answered
	// with an error, as a service does that cannot tell yet.
	unsure    bool
	questions map[string]int // questions about the charges, by order
}

// effect is one charge that the service applied.
type effect struct {
	Order string    `json:"order"`
	Key   string    `json:"key"`
	ID    string    `json:"id"`
	At    time.Time `json:"at"`
}

func newService(t *testing.T, keys bool) *service {
	t.Helper()
	s := &service{t: t, keys: keys, byKey: map[string]effect{}, posts: map[string]int{}, questions: map[string]int{}, firstPost: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", s.charge)
	mux.HandleFunc("GET /charges", s.list)
	s.srv = httptest.NewServer(s.counted(mux))
	t.Cleanup(func() {
		s.release()
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// URL is the base URL that the operator charges.
func (s *service) URL() string { return s.srv.URL }

// counted keeps the number of requests being served.
func (s *service) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.mu.Lock()
		s.inflight++
		s.lastSeen = time.Now()
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inflight--
			s.mu.Unlock()
		}()
		h.ServeHTTP(w, req)
	})
}

// charge applies a charge of the order, as soon as it arrives, and
// answers with its id.
func (s *service) charge(w http.ResponseWriter, req *http.Request) {
	order, key := req.URL.Query().Get("order"), req.Header.Get("Idempotency-Key")
	if order == "" || key == "" {
		http.Error(w, "want an order and an Idempotency-Key", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.posts[order]++
	s.received++
	first := s.received == 1
	crash, kill, held, delay := s.crash, s.kill, s.held, s.delay
	if first {
		s.firstOrder = order
		close(s.firstPost)
	}
	s.mu.Unlock()

	if first && crash == beforeEffect {
		kill()
		http.Error(w, "the caller is gone", http.StatusServiceUnavailable)
		return
	}
	e := s.apply(order, key)
	switch {
	case first && crash == afterEffect:
		kill()
	case first && crash == lostAnswer:
		http.Error(w, "the charge was made, and its answer lost", http.StatusInternalServerError)
		return
	case first && crash == timeout:
		<-req.Context().Done() // the caller gave up
		return
	}
	if held != nil {
		<-held
	}
	if delay {
		time.Sleep(rand.N(200 * time.Millisecond))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"id": e.ID})
}

// apply makes the charge, or finds the one made under key when the
// service honours keys.
func (s *service) apply(order, key string) effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok && s.keys {
		return e
	}
	e := effect{Order: order, Key: key, ID: fmt.Sprintf("ch_%04d", len(s.effects)+1), At: time.Now()}
	s.effects = append(s.effects, e)
	if _, ok := s.byKey[key]; !ok {
		s.byKey[key] = e
	}
	return e
}

// list answers the order's charges.
func (s *service) list(w http.ResponseWriter, req *http.Request) {
	order := req.URL.Query().Get("order")
	s.mu.Lock()
	s.questions[order]++
	unsure := s.unsure && s.questions[order] == 1
	s.mu.Unlock()
	if unsure {
		http.Error(w, "cannot tell yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.effectsOf(order))
}

// effectsOf returns the charges of order, in the order they were made.
func (s *service) effectsOf(order string) []effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []effect{}
	for _, e := range s.effects {
		if e.Order == order {
			out = append(out, e)
		}
	}
	return out
}

// first returns the order of the first charge asked for.
func (s *service) first() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstOrder
}

// asked counts the charges asked for.
func (s *service) asked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

// postsOf counts the charges of order asked for.
func (s *service) postsOf(order string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts[order]
}

// arm has the first charge kill the operator with kill, at point, or lose
// its answer, as point says.
func (s *service) arm(point string, kill func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crash, s.kill = point, kill
}

// delayAnswers answers each charge after up to 200 ms.
func (s *service) delayAnswers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = true
}

// answerUnsure answers the first question about each order's charges
// with an error.
func (s *service) answerUnsure() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsure = true
}

// questionsOf counts the questions about the charges of order.
func (s *service) questionsOf(order string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.questions[order]
}

// hold holds every charge from now on, after it is applied, until
// release.
func (s *service) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
}

// release answers the charges held, and holds no more.
func (s *service) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// waitPosts waits until n charges have been asked for.
func (s *service) waitPosts(n int, within time.Duration) {
	s.t.Helper()
	eventually(s.t, within, fmt.Sprintf("the service to receive %d charges", n), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.received >= n
	})
}

// waitQuiet waits until the service serves no request and has received
// none for a moment: what a dead process had sent has arrived and been
// applied.
func (s *service) waitQuiet(within time.Duration) {
	s.t.Helper()
	const moment = 100 * time.Millisecond
	eventually(s.t, within, "the service to fall quiet", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 0 && time.Since(s.lastSeen) > moment
	})
}
