package fence

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A write that the fence let through and that hangs (on a partition,
// say) is cut off when the fence closes, not when the network gives up.
func TestFenceCutsOffAWriteWhenItCloses(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	const window = 300 * time.Millisecond
	f := New(window, "the test Lease", false)
	renewed := time.Now()
	f.Hold(renewed)
	c := &http.Client{Transport: f.Transport(http.DefaultTransport), Timeout: 10 * time.Second}
	resp, err := c.Post(srv.URL+"/api/v1/namespaces/ns/configmaps", "application/json", strings.NewReader(`{}`))
	if err == nil {
		_ = resp.Body.Close()
	}
	took := time.Since(renewed)
	if err == nil || !strings.Contains(err.Error(), "cut off: this process may no longer hold the test Lease") {
		t.Errorf("a write that hangs past the fence: got %v, want it cut off", err)
	}
	// Never before the fence closes; on a loaded machine, maybe late.
	if took < window || took > window+5*time.Second {
		t.Errorf("the write ended %v after the renewal, want when the fence closed, %v after it", took, window)
	}
}

// A write whose answer is still arriving when the fence closes is cut off
// too, and its error says so, as for one that waits for its headers.
func TestFenceCutsOffAnAnswerItIsReading(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"kind":`))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	f := New(300*time.Millisecond, "the test Lease", false)
	f.Hold(time.Now())
	c := &http.Client{Transport: f.Transport(http.DefaultTransport), Timeout: 10 * time.Second}
	resp, err := c.Post(srv.URL+"/api/v1/namespaces/ns/configmaps", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatalf("the answer's headers came before the fence closed, yet: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.ReadAll(resp.Body)
	if err == nil || !strings.Contains(err.Error(), "cut off: this process may no longer hold the test Lease") {
		t.Errorf("reading an answer past the fence: got %v, want it cut off", err)
	}
}
