package dashboard

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The page's colours meet WCAG 2.2 AA, in the light palette and in the
// dark one: 4.5:1 for text on each background it is drawn on, and 3:1 for
// the lines, borders and focus rings that tell states, edges and the
// focused state apart.
func TestColoursContrast(t *testing.T) {
	css, err := web.ReadFile("web/static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	light, dark := palettes(t, string(css))
	for name := range light {
		if _, ok := dark[name]; !ok {
			t.Errorf("the dark palette does not set --%s, so the light one's shows in dark mode", name)
		}
	}
	cases := []struct {
		fg, bg string
		min    float64
	}{
		{"fg", "bg", 4.5}, {"muted", "bg", 4.5}, {"accent", "bg", 4.5}, {"danger", "bg", 4.5},
		{"header-fg", "header-bg", 4.5},
		{"fg", "deletion-bg", 4.5}, {"muted", "deletion-bg", 4.5}, {"danger", "deletion-bg", 4.5},
		{"fg", "occupied-bg", 4.5}, {"muted", "occupied-bg", 4.5}, {"danger", "occupied-bg", 4.5},
		{"fg", "selected-bg", 4.5}, {"muted", "selected-bg", 4.5}, {"danger", "selected-bg", 4.5},
		// Hovered buttons take the occupied states' background.
		{"accent", "occupied-bg", 4.5},
		{"edge", "bg", 3}, {"accent", "bg", 3}, {"final", "bg", 3}, {"final", "deletion-bg", 3},
		{"final", "occupied-bg", 3}, {"final", "selected-bg", 3},
		// The focus ring, on a state of any kind.
		{"accent", "deletion-bg", 3}, {"accent", "occupied-bg", 3}, {"accent", "selected-bg", 3},
	}
	for scheme, colours := range map[string]map[string]string{"light": light, "dark": dark} {
		for _, c := range cases {
			fg, ok1 := colours[c.fg]
			bg, ok2 := colours[c.bg]
			if !ok1 || !ok2 {
				t.Errorf("style.css's %s palette does not define --%s and --%s as #rrggbb", scheme, c.fg, c.bg)
				continue
			}
			if got := contrast(fg, bg); got < c.min {
				t.Errorf("%s: --%s (%s) on --%s (%s) has a contrast of %.2f:1, want at least %g:1", scheme, c.fg, fg, c.bg, bg, got, c.min)
			}
		}
	}
}

// palettes reads the colours of style.css's first :root rule, the light
// palette, and of the :root rule under prefers-color-scheme: dark.
func palettes(t *testing.T, css string) (light, dark map[string]string) {
	t.Helper()
	root := regexp.MustCompile(`:root\s*\{([^}]*)\}`)
	read := func(css string) map[string]string {
		block := root.FindStringSubmatch(css)
		if block == nil {
			t.Fatal("style.css has no :root rule where its palette should be")
		}
		colours := map[string]string{}
		for _, m := range regexp.MustCompile(`--([a-z-]+):\s*(#[0-9a-fA-F]{6});`).FindAllStringSubmatch(block[1], -1) {
			colours[m[1]] = m[2]
		}
		return colours
	}
	_, darkCSS, ok := strings.Cut(css, "@media (prefers-color-scheme: dark)")
	if !ok {
		t.Fatal("style.css has no dark palette under @media (prefers-color-scheme: dark)")
	}
	return read(css), read(darkCSS)
}

// contrast is the WCAG contrast ratio of two #rrggbb colours.
func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var l float64
	for i, weight := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(v) / 255
		if c <= 0.04045 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += weight * c
	}
	return l
}

func TestContrastOfKnownPairs(t *testing.T) {
	if got := contrast("#000000", "#ffffff"); math.Abs(got-21) > 0.01 {
		t.Errorf("black on white: %.2f, want 21", got)
	}
	if got := contrast("#777777", "#ffffff"); math.Abs(got-4.48) > 0.01 {
		t.Errorf("#777 on white: %.2f, want 4.48", got)
	}
}
