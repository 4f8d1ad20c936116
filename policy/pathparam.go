package policy

import (
	"fmt"
	"path"
	"strings"
)

// validatePathParam checks type path's within, and warns about a string
// pattern that tries to confine a path: the gateway matches a pattern
// against the string as written, and "^/srv/data/" lets
// "/srv/data/../outside/secret.txt" through to a tool that resolves it.
func validatePathParam(p *ParamSchema, pf, workdir string, r *report) {
	switch {
	case p.Type == TypePath && len(p.Within) == 0:
		r.errorf("required", pf+".within", "list the directories the path must stay in, e.g. within: [/srv/data] or [${workdir}]",
			"a path argument needs within")
	case p.Type != TypePath && len(p.Within) > 0:
		r.errorf("format", pf+".within", "write type: path: within confines a file path as the tool resolves it",
			"within on a %s argument", p.Type)
	case p.Type == "string" && looksLikePathPrefix(p.Pattern):
		r.warnf("pattern-path", pf+".pattern", "write {type: path, within: [DIR]}: it checks where the path leads (cleaned, symlinks resolved)",
			"pattern %s checks the path as written: %s", p.Pattern, "a path with .. or a symlink in it matches and leads elsewhere")
	}
	for i, w := range p.Within {
		f := fmt.Sprintf("%s.within[%d]", pf, i)
		body := w
		if rest, ok := strings.CutPrefix(w, WorkdirVar); ok {
			if workdir == "" {
				r.errorf("workdir", f, "set workdir: /absolute/dir, or write an absolute path", "%s uses ${workdir} but the manifest has no workdir", w)
				continue
			}
			if rest != "" && !strings.HasPrefix(rest, "/") {
				r.errorf("format", f, "write ${workdir}/"+rest, "%q: ${workdir} is followed by a name, not a /", w)
				continue
			}
			body = rest
			if body == "" {
				body = "/"
			}
		}
		switch {
		case strings.ContainsRune(w, 0):
			r.errorf("format", f, "write an absolute directory", "contains a NUL byte")
		case !path.IsAbs(body):
			r.errorf("format", f, "write an absolute directory, e.g. /srv/data or ${workdir}/data", "%q is relative", w)
		case path.Clean(body) != body && path.Clean(body)+"/" != body:
			r.errorf("format", f, "write "+strings.TrimSuffix(w, body)+path.Clean(body), "%q is not clean (it has . or .. or //)", w)
		}
	}
}

// looksLikePathPrefix reports whether a regular expression anchors an
// absolute path: ^/..., ^\/...
func looksLikePathPrefix(re string) bool {
	return strings.HasPrefix(re, "^/") || strings.HasPrefix(re, `^\/`)
}
