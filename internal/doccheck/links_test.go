package doccheck

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// The repository's documents, relative to its root.
var documents = []string{"*.md", "docs/*.md", "*/README.md", "examples/*/README.md"}

// Every relative link in kfsm's documents reaches a file or directory that
// exists, and a link to a heading of a document reaches one it has.
func TestDocumentLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	var files []string
	for _, pattern := range documents {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matches...)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d documents: %v", len(files), files)
	}
	anchorsOf := map[string]map[string]bool{}
	headings := func(path string) map[string]bool {
		if a, ok := anchorsOf[path]; ok {
			return a
		}
		anchorsOf[path] = anchors(Read(t, path))
		return anchorsOf[path]
	}
	for _, file := range files {
		name, _ := filepath.Rel(root, file)
		for _, link := range links(Read(t, file)) {
			path, anchor, _ := strings.Cut(link, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s links to %s, which does not exist", name, link)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !headings(target)[anchor] {
				t.Errorf("%s links to %s, but that document has no heading #%s", name, link, anchor)
			}
		}
	}
}

func TestLinks(t *testing.T) {
	cases := map[string]struct {
		reason string
		doc    string
		want   []string
	}{
		"Relative": {
			reason: "Links and images to paths in the repository are relative links.",
			doc:    "See [the guide](docs/guide.md#setup) and ![a picture](docs/a.png \"title\").\n",
			want:   []string{"docs/guide.md#setup", "docs/a.png"},
		},
		"CodeInText": {
			reason: "A link whose text is code is a link.",
			doc:    "The [`fsm`](fsm/doc.go) package; `[not](a-link)` in code.\n",
			want:   []string{"fsm/doc.go"},
		},
		"External": {
			reason: "Links with a scheme leave the repository.",
			doc:    "[semver](https://semver.org), [mail](mailto:a@b.c)\n\n[0.1.0]: https://example.com/v0.1.0\n",
		},
		"Definitions": {
			reason: "A reference definition is a link.",
			doc:    "[guide]: docs/guide.md\n",
			want:   []string{"docs/guide.md"},
		},
		"FencedCode": {
			reason: "Nothing in a fenced code block is a link.",
			doc:    "```go\nx := m[k](y)\n// [a](b)\n```\n[c](d)\n",
			want:   []string{"d"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, links(tc.doc)); diff != "" {
				t.Errorf("%s\nlinks(...): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestAnchors(t *testing.T) {
	cases := map[string]struct {
		reason string
		doc    string
		want   []string
	}{
		"Words": {
			reason: "A heading's anchor is its words in lower case, joined by hyphens.",
			doc:    "# kfsm\n\n## The two commands\n",
			want:   []string{"kfsm", "the-two-commands"},
		},
		"Punctuation": {
			reason: "Punctuation and code marks go; hyphens and underscores stay.",
			doc:    "## Scale out: one machine, `fsm.Sharded`\n## A five-minute tutorial_x\n",
			want:   []string{"a-five-minute-tutorial_x", "scale-out-one-machine-fsmsharded"},
		},
		"Links": {
			reason: "A link in a heading counts by its text.",
			doc:    "## The [demo](demo.md)\n",
			want:   []string{"the-demo"},
		},
		"Repeated": {
			reason: "A repeated heading's anchor is numbered.",
			doc:    "## Notes\n## Notes\n",
			want:   []string{"notes", "notes-1"},
		},
		"FencedCode": {
			reason: "A comment in a fenced code block is not a heading.",
			doc:    "```sh\n# not a heading\n```\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(anchors(tc.doc)))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nanchors(...): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

var (
	inlineLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	definition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the targets of the relative links and images in doc,
// outside code.
func links(doc string) []string {
	var out []string
	for _, line := range prose(doc) {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := definition.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if !scheme.MatchString(target) {
				out = append(out, target)
			}
		}
	}
	return out
}

// anchors returns the anchors of doc's headings, as GitHub makes them.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range prose(doc) {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if text != "" && text[0] != ' ' {
			continue
		}
		text = inlineLink.ReplaceAllStringFunc(strings.TrimSpace(text), func(l string) string {
			return l[1:strings.Index(l, "](")]
		})
		var slug strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				slug.WriteRune(r)
			}
		}
		anchor := slug.String()
		for n := 1; out[anchor]; n++ {
			anchor = slug.String() + "-" + strconv.Itoa(n)
		}
		out[anchor] = true
	}
	return out
}

// prose returns the lines of doc outside fenced code blocks.
func prose(doc string) []string {
	var out []string
	fence := ""
	for line := range strings.SplitSeq(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"):
			fence = "```"
		case strings.HasPrefix(trimmed, "~~~"):
			fence = "~~~"
		default:
			out = append(out, line)
		}
	}
	return out
}
