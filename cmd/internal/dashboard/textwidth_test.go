package dashboard

import "testing"

// The estimates are no narrower than Chromium draws the texts in DejaVu
// Sans, the page's sans-serif font on Debian, and at most a tenth wider.
func TestTextWidthIsOnTheWideSide(t *testing.T) {
	cases := map[string]struct {
		estimate float64
		rendered float64 // by Chromium, as getBBox measures it
	}{
		"LongName":  {textWidth("ProvisioningControlPlane", nameFont, true), 214.1},
		"ShortName": {textWidth("Ready", nameFont, true), 52.5},
		"Count":     {textWidth("0 objects", countFont, false), 59.4},
		"Tag":       {tagWidth("deletion, final"), 103.8},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.estimate < c.rendered || c.estimate > 1.1*c.rendered {
				t.Errorf("the estimate is %.1fpx, want between %.1fpx, as drawn, and a tenth more", c.estimate, c.rendered)
			}
		})
	}
}
