// Package argocd holds the Argo CD health check for kfsm objects.
//
// Argo CD judges a custom resource by a Lua script that it runs on the
// object; without one, every custom resource is Healthy as soon as it
// exists. [HealthLua] is that script for any type whose status embeds
// fsm.Status. Install it in the argocd-cm ConfigMap, once per kind, under
// the key resource.customizations.health.<group>_<Kind>:
//
//	data:
//	  resource.customizations.health.example.com_Moose: |
//	    -- Argo CD health check for objects driven by kfsm.
//	    ...the rest of health.lua, indented...
//
// The README next to this file has the whole ConfigMap for the example
// operators.
//
// # Guarantees
//
// The script agrees with kstatus (sigs.k8s.io/cli-utils), which Flux and
// kpt use to wait for resources, on the same object:
//
//	kstatus       Argo CD
//	Current       Healthy
//	InProgress    Progressing
//	Failed        Degraded
//	Terminating   Progressing
//
// So an object that is converged is Healthy, one that kfsm is walking,
// waiting on or retrying after a handler's failure is Progressing, one
// that is Stalled (retries exhausted, Stop, a refused transition) is
// Degraded, and one whose spec kfsm has not yet seen is Progressing. The
// message is the reason and message of the Ready condition, or of the
// Stalled condition for a Degraded object.
//
// # Caveats
//
// Two answers are kfsm's own, where kstatus cannot know better:
//
//   - An object with the annotation kfsm.dev/paused set to "true" is
//     Suspended: no handler runs for it. kstatus ignores the annotation
//     and the Paused condition and answers as if the object were not
//     paused: Current for one that was Ready, Failed for one that was
//     Stalled.
//   - An object without status.observedGeneration is Progressing: kfsm
//     has not reconciled it yet. kstatus, which cannot tell such an
//     object from one whose controller writes no status, reports it
//     Current.
//
// Argo CD reports every object that is being deleted as Progressing
// ("Pending deletion") without running its health check. The script says
// Progressing too, paused or not, as kstatus's Terminating maps to it.
//
// Argo CD runs the script without Lua's string library (unless
// resource.customizations.useOpenLibs.<group>_<Kind> is "true"); the
// script does not need it.
package argocd

import _ "embed"

// HealthLua is the Lua health check for kfsm objects, for Argo CD's
// resource.customizations.health.<group>_<Kind> setting.
//
//go:embed health.lua
var HealthLua string
