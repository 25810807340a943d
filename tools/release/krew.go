package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/krew/pkg/constants"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"
)

// krewManifest is krew's manifest of the plugin at version, a Plugin of
// krew's own types: a platform for each archive, selected by its os and
// arch, downloaded from its URL and checked against its SHA-256, with the
// binary and LICENSE copied out of it. krew install --manifest reads it;
// krew's index takes it as NAME.yaml.
func krewManifest(p *plugin, version string, archives []archive) ([]byte, error) {
	m := index.Plugin{
		TypeMeta:   metav1.TypeMeta{APIVersion: constants.CurrentAPIVersion, Kind: constants.PluginKind},
		ObjectMeta: metav1.ObjectMeta{Name: p.name},
		Spec: index.PluginSpec{
			Version:          version,
			Homepage:         p.homepage,
			ShortDescription: p.shortDescription,
			Description:      p.description,
			Caveats:          p.caveats,
		},
	}
	for _, a := range archives {
		uri, err := p.archiveURL(version, a.name)
		if err != nil {
			return nil, err
		}
		bin := p.executable(a.platform)
		m.Spec.Platforms = append(m.Spec.Platforms, index.Platform{
			URI:      uri,
			Sha256:   a.sha256,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": a.os, "arch": a.arch}},
			Files:    []index.FileOperation{{From: bin, To: "."}, {From: "LICENSE", To: "."}},
			Bin:      bin,
		})
	}
	return yaml.Marshal(m)
}
