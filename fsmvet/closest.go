package fsmvet

import "strings"

// closest returns the name among names nearest to s when it is near
// enough to be a typo of it: at most a third of s's length apart, case
// aside. Ties go to the name declared first. Package fsm suggests names
// by the same rule.
func closest(s string, names []string) string {
	best, bestDist := "", (len(s)+2)/3+1
	for _, n := range names {
		if d := distance(strings.ToLower(s), strings.ToLower(n)); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
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
