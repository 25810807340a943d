// Package typo finds the name that a misspelt name was meant to be, for
// kfsm's run-time refusals and kfsm vet to suggest in the same way.
package typo

import (
	"strings"
	"unicode/utf8"
)

// Closest returns the name among names nearest to s when it is near
// enough to be a typo of it: at most a third of s's length in characters
// apart (in edits of a character), case aside. Ties go to the name listed
// first; "" means none is near.
func Closest[S ~string](s S, names []S) S {
	var best S
	bestDist := (utf8.RuneCountInString(string(s))+2)/3 + 1
	for _, n := range names {
		if d := distance(strings.ToLower(string(s)), strings.ToLower(string(n))); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev, cur := make([]int, len(rb)+1), make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
