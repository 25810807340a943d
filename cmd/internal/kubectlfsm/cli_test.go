package kubectlfsm_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
	"github.com/kfsm/kfsm/fsm"
)

// kubectl fsm version names the kfsm it was built from, as Go records
// it: a release's archive says which release it is.
func TestVersionNamesKubectlFsmAndGo(t *testing.T) {
	var out bytes.Buffer
	root := kubectlfsm.NewPluginCommand(&kubectlfsm.Options{})
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("kubectl fsm %s, built with %s\n", fsm.Version(), runtime.Version()); out.String() != want {
		t.Errorf("kubectl fsm version printed\n%s\nwant\n%s", out.String(), want)
	}
}
