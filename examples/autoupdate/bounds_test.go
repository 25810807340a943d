package autoupdate_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/examples/autoupdate"
	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	"github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/fsmtest"
)

// A release that the status cannot hold is refused and the status says
// why, while the client keeps running what it runs; a release that fits
// is installed again.
func TestAReleaseTooLongForTheStatusIsRefused(t *testing.T) {
	t.Parallel()
	e := fsmtest.New(t)
	w := worldOf(e)
	fsmtest.Run(e, w.operator().Machine())
	w.versions.Publish("stable", release("1.0.0", false))
	mc := agent()
	e.Create(mc)
	at(e, mc, "1.0.0")

	longConfig := release("1.1.0", false)
	longConfig.ConfigYaml = strings.Repeat("#", v1alpha1.MaxConfigLength+1)
	for _, c := range []struct {
		what    string
		pkg     *versionpb.Package
		refusal string
	}{
		{"a version", release("1.1.0+"+strings.Repeat("b", v1alpha1.MaxVersionLength), false), "its version has"},
		{"a configuration", longConfig, "its configuration has"},
	} {
		w.versions.Publish("stable", c.pkg)
		e.Await("the release with too long "+c.what+" to be refused", func() bool {
			return e.Get(mc) && strings.Contains(mc.Status.ServerError, c.refusal)
		})
		if !settled(mc, "1.0.0") || mc.Status.Offered != "1.0.0" {
			t.Errorf("after refusing %s: %s, offered %q; want 1.0.0 at rest", c.what, where(mc), mc.Status.Offered)
		}
		if diff := cmp.Diff([]string{"1.0.0"}, w.running()); diff != "" {
			t.Errorf("running instances after refusing %s (-want +got):\n%s", c.what, diff)
		}
	}
	if !slices.ContainsFunc(e.Events(mc), func(ev fsmtest.Event) bool { return ev.Reason == "ReleaseRefused" }) {
		t.Error("no ReleaseRefused event")
	}

	w.versions.Publish("stable", release("1.1.0", false))
	at(e, mc, "1.1.0")
	if mc.Status.ServerError != "" || mc.Status.State != autoupdate.Processed {
		t.Errorf("%s once a release fits; want no server error", where(mc))
	}
}
