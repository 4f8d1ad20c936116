//go:build linux && (amd64 || arm64)

package observe

import "testing"

// TestTmpfileDir: the kernel's name of an O_TMPFILE file (#<inode> in its
// directory) is named by the directory; any other name stays.
func TestTmpfileDir(t *testing.T) {
	for in, want := range map[string]string{
		"/srv/w/#10182788":   "/srv/w",
		"/#12":               "/",
		"/srv/w":             "/srv/w",
		"/srv/w/#notanumber": "/srv/w/#notanumber",
		"/srv/w/#":           "/srv/w/#",
		"/srv/w/#12/x":       "/srv/w/#12/x",
		"relative/#12":       "relative",
		"/srv/w/file#12":     "/srv/w/file#12",
	} {
		if got := tmpfileDir(in); got != want {
			t.Errorf("tmpfileDir(%q) = %q, want %q", in, got, want)
		}
	}
}
