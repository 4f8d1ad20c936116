package policy

import "strings"

// suggest returns the candidate closest to s by edit distance, or "" when
// none is close enough to be a plausible typo.
func suggest(s string, candidates []string) string {
	best, bestD := "", len(s)/3+2
	ls := strings.ToLower(s)
	for _, c := range candidates {
		if d := editDistance(ls, strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func didYouMean(s string, candidates []string) string {
	if c := suggest(s, candidates); c != "" {
		return " (did you mean " + c + "?)"
	}
	return ""
}

// editDistance is the Levenshtein distance, with a cap on input length so a
// hostile manifest cannot make validation quadratic in a huge key.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
