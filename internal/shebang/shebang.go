// Package shebang reads a script's "#!" line: the interpreter the kernel
// runs for it, and the one argument the kernel passes along. It only reads;
// what a caller makes of the interpreter (declare it, refuse env) is its
// own. Errors are the file system's.
package shebang

import (
	"bufio"
	"os"
	"strings"
)

// maxLine bounds what is read: the kernel looks at no more of a script.
const maxLine = 256

// Read returns the fields of path's "#!" line (the interpreter first, at
// most one argument after it, as the kernel splits it); script is false,
// with no error, for a file that does not start with "#!".
func Read(path string) (fields []string, script bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, maxLine).ReadSlice('\n')
	if err != nil && len(line) == 0 {
		return nil, false, nil // empty: no script
	}
	rest, ok := strings.CutPrefix(string(line), "#!")
	if !ok {
		return nil, false, nil
	}
	fields = strings.Fields(rest)
	if len(fields) > 2 {
		fields = []string{fields[0], strings.Join(fields[1:], " ")}
	}
	return fields, true, nil
}
