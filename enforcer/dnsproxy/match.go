package dnsproxy

import "strings"

// Match returns the first of patterns that name matches: an exact host
// name, or "*.suffix" for a name of one or more labels followed by
// ".suffix". Names and patterns compare case-insensitively, a trailing dot
// ignored. A name that is not a valid host name (ValidName) matches
// nothing.
func Match(patterns []string, name string) (string, bool) {
	if !ValidName(name) {
		return "", false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, p := range patterns {
		lp := strings.ToLower(strings.TrimSuffix(p, "."))
		if suffix, ok := strings.CutPrefix(lp, "*."); ok {
			if suffix != "" && len(name) > len(suffix)+1 && strings.HasSuffix(name, "."+suffix) {
				return p, true
			}
			continue
		}
		if lp != "" && name == lp {
			return p, true
		}
	}
	return "", false
}

// ValidName reports whether name (a trailing dot allowed) is a host name
// the proxy will forward: at most 253 characters, labels of 1 to 63
// letters, digits, '-' and '_'.
func ValidName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	n := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '.' {
			if n == 0 || n > 63 {
				return false
			}
			n = 0
			continue
		}
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
		n++
	}
	return true
}
