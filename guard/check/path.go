package check

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/klocklabs/klock/guard/toolerr"
)

// maxLinks is the kernel's own bound on symlinks followed in one lookup
// (ELOOP past it): a path the kernel would refuse is not resolved further.
const maxLinks = 40

// errLoop is a path with more symlinks than the kernel follows.
var errLoop = errors.New("too many levels of symbolic links")

// pathViews is where one path argument leads, in both ways a tool may
// take it: as the kernel walks the string (each component in turn, ".."
// applied to the directory reached, symlinks followed), and after a
// lexical clean first (Node's path.resolve, Python's os.path.abspath), which
// differ when a ".." follows a symlink. Both must stay within the roots.
type pathViews struct {
	kernel, lexical string
}

// resolvePath returns where the kernel takes the absolute path p on this
// host: every symlink followed, as open(2) does without O_NOFOLLOW (a tool
// that does not follow the last link is judged as if it did: stricter,
// never looser). A component that does not exist ends the walk and the rest
// is appended lexically, so a file the tool will create resolves through
// its existing parent, and a ".." past a missing directory (which the
// kernel would refuse) still cannot climb out unseen.
func resolvePath(p string) (string, error) {
	resolved, rest, links := "/", p, 0
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(strings.TrimLeft(rest, "/"), "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			continue
		}
		next := path.Join(resolved, comp)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			return path.Join(next, rest), nil
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink == 0:
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", errLoop
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = "/"
		}
		rest = target + "/" + rest
	}
	return resolved, nil
}

// within reports whether the clean absolute path p is root or below it.
func within(p, root string) bool {
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// checkPath resolves a type path argument and confines it to the roots
// (resolved too: a root may itself be reached through a link). The gateway
// resolves with the host's view at check time; a link swapped in between
// the check and the tool's own lookup is the kernel wall's to stop
// (klock mcp --enforce), not the gateway's.
func (c *contract) checkPath(p *param, s string) (pathViews, *toolerr.Error) {
	refuse := func(reason, format string, a ...any) (pathViews, *toolerr.Error) {
		return pathViews{}, toolerr.New(toolerr.InvalidArgs, reason, "%s: argument %q is %s, "+format, append([]any{c.tool.Name, p.name, short(s)}, a...)...)
	}
	roots := strings.Join(p.roots, ", ")
	switch {
	case strings.ContainsRune(s, 0):
		return refuse("path_invalid", "which holds a NUL byte: no file has that name")
	case !strings.HasPrefix(s, "/"):
		return refuse("path_relative", "a relative path: give an absolute path inside %s (the gateway cannot know the tool's working directory)", roots)
	}
	var v pathViews
	var err error
	if v.kernel, err = resolvePath(s); err == nil {
		v.lexical, err = resolvePath(path.Clean(s))
	}
	if err != nil {
		return refuse("path_unresolvable", "which cannot be resolved (%v): where it leads cannot be checked against %s", err, roots)
	}
	for _, leads := range []string{v.kernel, v.lexical} {
		if !c.inRoots(p, leads) {
			return refuse("path_outside", "which leads to %s, outside %s (the contract's within): use a path inside it, without .. or a link that leaves it", short(leads), roots)
		}
	}
	return v, nil
}

func (c *contract) inRoots(p *param, leads string) bool {
	for _, r := range p.roots {
		root, err := resolvePath(r)
		if err != nil {
			continue // a root that cannot be resolved confines nothing
		}
		if within(leads, root) {
			return true
		}
	}
	return false
}

// kernelView and lexicalView pick one of a path's views.
func kernelView(v pathViews) string  { return v.kernel }
func lexicalView(v pathViews) string { return v.lexical }

// withPaths returns args with each path argument replaced by one view.
func withPaths(args map[string]any, paths map[string]pathViews, view func(pathViews) string) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = v
	}
	for k, v := range paths {
		out[k] = view(v)
	}
	return out
}

// evalAutonomy evaluates unsupervised_if on the arguments as written and,
// for path arguments, on where they lead in each view: the call runs
// unsupervised only when all agree. path.startsWith("/srv/repo/src/") is
// otherwise true of "/srv/repo/src/../config/prod.yaml".
func (c *contract) evalAutonomy(call *Call, paths map[string]pathViews) (bool, error) {
	ok, err := c.autonomy.Eval(call.Args, call.Context)
	if !ok || err != nil || paths == nil {
		return ok, err
	}
	for _, view := range []func(pathViews) string{kernelView, lexicalView} {
		if ok, err = c.autonomy.Eval(withPaths(call.Args, paths, view), call.Context); !ok || err != nil {
			return ok, err
		}
	}
	return true, nil
}
