//go:build linux

package launch

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/klocklabs/klock/internal/shebang"
)

// execHint says what would let the agent's command run when stage 2's exec
// of it was refused (EACCES, EPERM): most often the manifest declares no
// PROVIDES PROC for it, or, for a script, for the interpreter its #! line
// names (npm is "#!/usr/bin/env node", and the wall refuses /usr/bin/env).
// "" when the failure is another.
func execHint(se *StageError, uid uint32) string {
	if se.Step != "exec" || se.Path == "" || !(errors.Is(se.Errno, syscall.EACCES) || errors.Is(se.Errno, syscall.EPERM)) {
		return ""
	}
	need := "PROVIDES PROC:" + se.Path + " in the manifest"
	// Read as root: the agent may not read the file.
	if f, script, _ := shebang.Read(se.Path); script && len(f) > 0 {
		need += ", and its #! interpreter, PROVIDES PROC:" + f[0]
		if len(f) == 2 && strings.HasSuffix(f[0], "/env") {
			need += " (and " + f[1] + ", which it runs)"
		}
	}
	return fmt.Sprintf("Fix: declare %s; or, where that is declared, let uid %d execute it (its mode, and search permission on its directories)", need, uid)
}
