package fsm_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm"
)

func TestFenceLeaderElectionRefusesBadOptions(t *testing.T) {
	good := func() manager.Options {
		return manager.Options{LeaderElection: true, LeaderElectionID: "op", LeaderElectionNamespace: "ops"}
	}
	for _, tc := range []struct {
		change func(*manager.Options)
		says   string
	}{
		{func(o *manager.Options) { o.LeaderElection = false }, "do not ask for leader election"},
		{func(o *manager.Options) { o.LeaderElectionNamespace = "" }, "LeaderElectionNamespace must be set"},
		{func(o *manager.Options) { o.LeaderElectionResourceLock = "configmapsleases" }, `only "leases" is fenced`},
		{func(o *manager.Options) { o.LeaseDuration, o.RenewDeadline = ptr.To(time.Second), ptr.To(time.Second) }, "must be shorter than LeaseDuration"},
	} {
		opts := good()
		tc.change(&opts)
		err := fsm.FenceLeaderElection(&rest.Config{Host: "https://127.0.0.1:1"}, &opts, "")
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("got %v, want an error saying %q", err, tc.says)
		}
		if opts.LeaderElectionResourceLockInterface != nil {
			t.Error("refused options were changed")
		}
	}
}

// Until the process holds the Lease, the fence lets reads through and
// refuses writes before they leave the process. Reviews store nothing:
// they pass, so that a replica that does not lead may still ask the API
// server who it is, as its admission webhooks do.
func TestFenceRefusesWritesUntilTheLeaseIsHeld(t *testing.T) {
	var posted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			posted = append(posted, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	opts := manager.Options{LeaderElection: true, LeaderElectionID: "op", LeaderElectionNamespace: "ops"}
	if err := fsm.FenceLeaderElection(cfg, &opts, "a"); err != nil {
		t.Fatal(err)
	}
	if got := opts.LeaderElectionResourceLockInterface.Identity(); got != "a" {
		t.Errorf("the Lease lock's identity is %q, want a", got)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt}
	if resp, err := c.Get(srv.URL + "/api/v1/namespaces/ops/configmaps"); err != nil {
		t.Errorf("a read through the fence: %v", err)
	} else {
		_ = resp.Body.Close()
	}
	resp, err := c.Post(srv.URL+"/api/v1/namespaces/ops/configmaps", "application/json", strings.NewReader(`{}`))
	if err == nil {
		_ = resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "may no longer hold the leader election Lease") {
		t.Errorf("a write without the Lease: got %v, want it refused", err)
	}
	reviews := []string{
		"/apis/authentication.k8s.io/v1/selfsubjectreviews",
		"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
		"/apis/authorization.k8s.io/v1/namespaces/ops/localsubjectaccessreviews",
	}
	for _, path := range reviews {
		resp, err := c.Post(srv.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Errorf("POST %s without the Lease: %v, want it let through", path, err)
			continue
		}
		_ = resp.Body.Close()
	}
	if diff := cmp.Diff(reviews, posted); diff != "" {
		t.Errorf("what reached the server other than reads (-want the reviews only +got):\n%s", diff)
	}
}
