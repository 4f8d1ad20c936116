//go:build linux

package launch

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
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
	if interp, arg := shebang(se.Path); interp != "" {
		need += ", and its #! interpreter, PROVIDES PROC:" + interp
		if arg != "" && strings.HasSuffix(interp, "/env") {
			need += " (and " + arg + ", which it runs)"
		}
	}
	return fmt.Sprintf("Fix: declare %s; or, where that is declared, let uid %d execute it (its mode, and search permission on its directories)", need, uid)
}

// shebang reads a script's "#!interpreter [arg]" line (as root: the
// agent may not read the file); "" for anything else.
func shebang(path string) (interp, arg string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 256).ReadString('\n')
	if err != nil && line == "" {
		return "", ""
	}
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", ""
	}
	fields := strings.Fields(rest)
	switch len(fields) {
	case 0:
		return "", ""
	case 1:
		return fields[0], ""
	}
	return fields[0], fields[1]
}
