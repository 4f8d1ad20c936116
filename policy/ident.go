// The plain names klock uses as identifiers and in klock uses as identifiers and in
// file names (agent ids, tool names, session ids, plugin names): an ASCII
// letter or digit, then letters, digits, '.', '_' or '-', at most max bytes
// in all. Such a name is safe as one path component (no '/', never "." or
// "..") and in a log line.
//
// It replaces regular expressions of the form
// ^[A-Za-z0-9][A-Za-z0-9._-]{0,N}$, whose bounded repetition compiles into
// N copies of the class: ~100 KB of program each, built at every process
// start of every klock command.

package policy

// ValidName reports whether s is such a name of at most max bytes.
func ValidName(s string, max int) bool {
	if len(s) == 0 || len(s) > max || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
