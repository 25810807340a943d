package scaffold

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/internal/buildinfo"
)

func TestFlagsSetTheProject(t *testing.T) {
	var got Project
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	got.Flags(fs)
	if err := fs.Parse([]string{"--module", "example.com/widget", "--kind", "Widget", "--group", "example.com", "--kfsm-path", "../kfsm"}); err != nil {
		t.Fatal(err)
	}
	want := Project{Module: "example.com/widget", Kind: "Widget", Group: "example.com", Version: "v1alpha1", KFSMPath: "../kfsm"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("project (-want +got):\n%s", diff)
	}
}

// Without a checkout, a project requires the kfsm that the command is
// built with; a test binary's is no release, so Init refuses it by name.
func TestInitRequiresTheKFSMItIsBuiltWith(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "widget")
	p := widget(t)
	p.KFSMPath = ""
	var out, log strings.Builder
	err := p.Init(t.Context(), dir, &out, &log)
	want := "kfsm " + buildinfo.Version() + " is not a release"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Init() error = %v, want one that says %q", err, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused project left %s: %v", dir, err)
	}
	if out.Len()+log.Len() > 0 {
		t.Errorf("a refused project printed %q and logged %q", out.String(), log.String())
	}
}
