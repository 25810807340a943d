package autoupdate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
)

func TestRemember(t *testing.T) {
	full := make([]string, v1alpha1.MaxFailedVersions)
	for i := range full {
		full[i] = fmt.Sprintf("1.%d.0", i)
	}
	cases := map[string]struct {
		reason  string
		failed  []string
		version string
		want    []string
	}{
		"First": {
			reason:  "the first failed version is remembered",
			version: "1.0.0",
			want:    []string{"1.0.0"},
		},
		"Latest": {
			reason:  "a failed version goes after the others",
			failed:  []string{"1.0.0"},
			version: "1.1.0",
			want:    []string{"1.0.0", "1.1.0"},
		},
		"Full": {
			reason:  "the oldest is forgotten to make room for the latest",
			failed:  full,
			version: "2.0.0",
			want:    append(full[1:], "2.0.0"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := remember(tc.failed, tc.version)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nremember(...): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCut(t *testing.T) {
	cases := map[string]struct {
		reason string
		s      string
		n      int
		want   string
	}{
		"Short": {
			reason: "a string that fits is kept",
			s:      "down", n: 4,
			want: "down",
		},
		"Long": {
			reason: "a longer string is cut to n bytes",
			s:      strings.Repeat("x", 10), n: 4,
			want: "xxxx",
		},
		"MidCharacter": {
			reason: "a character that does not fit whole is left out",
			s:      "abcé", n: 4,
			want: "abc",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := cut(tc.s, tc.n); got != tc.want {
				t.Errorf("%s\ncut(%q, %d) = %q, want %q", tc.reason, tc.s, tc.n, got, tc.want)
			}
		})
	}
}
