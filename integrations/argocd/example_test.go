package argocd_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kfsm/kfsm/integrations/argocd"
)

// The data of an argocd-cm ConfigMap that checks the health of two kinds
// of an operator's own.
func ExampleHealthLua() {
	data := map[string]string{}
	for _, kind := range []string{"Moose", "Herd"} {
		data["resource.customizations.health.example.com_"+kind] = argocd.HealthLua
	}
	for _, key := range slices.Sorted(maps.Keys(data)) {
		first, _, _ := strings.Cut(data[key], "\n")
		fmt.Printf("%s: %s …\n", key, first)
	}
	// Output:
	// resource.customizations.health.example.com_Herd: -- Argo CD health check for objects driven by kfsm. …
	// resource.customizations.health.example.com_Moose: -- Argo CD health check for objects driven by kfsm. …
}
