package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/klocklabs/klock/internal/shebang"
	"github.com/klocklabs/klock/policy"
)

// ManifestFile is the plugin manifest's name inside a plugin directory.
const ManifestFile = "plugin.json"

// capabilityRe is a capability code, as the agent's manifest spells them.
var capabilityRe = regexp.MustCompile(`^tool\.[a-z0-9_][a-z0-9_.-]*\.[a-z]+$`)

// ErrManifest: a plugin manifest is missing, malformed or unsafe.
var ErrManifest = errors.New("invalid plugin manifest")

// Manifest is seed 004's plugin manifest; no other field is allowed.
type Manifest struct {
	Name         string      `json:"name"`
	Version      string      `json:"version"`
	Entry        string      `json:"entry"`
	Capabilities []string    `json:"capabilities"`
	Permissions  Permissions `json:"permissions"`
}

// Permissions widen the plugin's default scope (read-only file system, no
// network).
type Permissions struct {
	// Network lists "host:port/tcp" destinations; false or absent: none.
	Network []string
	// Read and Write list path patterns (as in manifest intents); the
	// manifest spells them "filesystem": {"read": [...], "write": [...]},
	// or false (absent): nothing beyond the plugin's own directory, read-only.
	Read, Write []string
	// InternalAPI is recorded, not granted (klock has no internal services).
	InternalAPI []string
	// Exec lists the programs (absolute paths) the plugin may execute
	// besides its entry and its interpreter; absent: none. It names a
	// program, never "anything", and never a shell (ErrShell): seed 004
	// §8.3 says a plugin launches none.
	Exec []string
}

type permissionsJSON struct {
	Network     json.RawMessage `json:"network"`
	Filesystem  json.RawMessage `json:"filesystem"`
	InternalAPI []string        `json:"internal_api"`
	Exec        []string        `json:"exec"`
}

func (p *Permissions) UnmarshalJSON(b []byte) error {
	var raw permissionsJSON
	if err := strictDecode(b, &raw); err != nil {
		return fmt.Errorf("permissions: %w", err)
	}
	p.InternalAPI, p.Exec = raw.InternalAPI, raw.Exec
	if off(raw.Network) {
		p.Network = nil
	} else if err := json.Unmarshal(raw.Network, &p.Network); err != nil {
		return errors.New(`permissions.network: want false or a list of "host:port/tcp" destinations (true would be every host: name them)`)
	}
	if !off(raw.Filesystem) {
		var fs struct {
			Read  []string `json:"read"`
			Write []string `json:"write"`
		}
		if err := strictDecode(raw.Filesystem, &fs); err != nil {
			return errors.New(`permissions.filesystem: want false or {"read": [patterns], "write": [patterns]} (true would be the whole file system: name the paths)`)
		}
		p.Read, p.Write = fs.Read, fs.Write
	}
	return nil
}

func (p Permissions) MarshalJSON() ([]byte, error) {
	out := map[string]any{"network": false, "filesystem": false, "internal_api": p.InternalAPI}
	if len(p.Exec) > 0 {
		out["exec"] = p.Exec
	}
	if len(p.Network) > 0 {
		out["network"] = p.Network
	}
	if len(p.Read)+len(p.Write) > 0 {
		out["filesystem"] = map[string][]string{"read": p.Read, "write": p.Write}
	}
	return json.Marshal(out)
}

func off(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "" || s == "false" || s == "null"
}

func strictDecode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// Plugin is a loaded, validated plugin.
type Plugin struct {
	Manifest
	// Dir is the plugin's directory and Entry the absolute path of its
	// entry program (no symlinks).
	Dir, EntryPath string
	// Interpreter is the entry's #! interpreter (resolved), if any.
	Interpreter string
	// Programs are permissions.exec, resolved.
	Programs []string
}

// Load reads and validates the plugin in dir.
func Load(dir string) (*Plugin, error) {
	dir, err := filepath.Abs(dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	path := filepath.Join(dir, ManifestFile)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrManifest, path, fmt.Sprintf(format, a...))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, bad("%v", err)
	}
	var m Manifest
	if err := strictDecode(data, &m); err != nil {
		return nil, bad("%v (allowed fields: name, version, entry, capabilities, permissions)", err)
	}
	switch {
	case !policy.ValidName(m.Name, 120):
		return nil, bad("name %q: use letters, digits, '.', '_' and '-' (it is the tool's name)", m.Name)
	case m.Version == "":
		return nil, bad(`version is required, e.g. "1.0.0"`)
	case m.Entry == "" || filepath.IsAbs(m.Entry) || !filepath.IsLocal(m.Entry):
		return nil, bad("entry %q: want a path inside the plugin directory, e.g. \"plugin.sh\"", m.Entry)
	case len(m.Capabilities) == 0:
		return nil, bad("capabilities: list the capability it serves, e.g. [\"tool.%s.invoke\"]", m.Name)
	}
	for _, c := range m.Capabilities {
		// Seed 004 names finer codes than tool.<name>.invoke
		// (tool.energy.meter.read): any tool.<...>.<verb> is a code.
		if !capabilityRe.MatchString(c) {
			return nil, bad("capability %q: want tool.<name>.invoke or a finer code such as tool.energy.meter.read", c)
		}
	}
	entry, err := filepath.EvalSymlinks(filepath.Join(dir, m.Entry))
	if err != nil {
		return nil, bad("entry: %v", err)
	}
	if rel, err := filepath.Rel(dir, entry); err != nil || !filepath.IsLocal(rel) {
		return nil, bad("entry %q resolves outside the plugin directory (%s)", m.Entry, entry)
	}
	st, err := os.Stat(entry)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return nil, bad("entry %s must be an executable regular file (chmod +x)", entry)
	}
	p := &Plugin{Manifest: m, Dir: dir, EntryPath: entry}
	if p.Interpreter, err = interpreter(entry); err != nil {
		return nil, bad("entry %s: %v", entry, err)
	}
	if p.Programs, err = programs(m.Permissions.Exec); err != nil {
		return nil, fmt.Errorf("%w: %s: permissions.exec: %w", ErrManifest, path, err)
	}
	return p, nil
}

// programs resolves permissions.exec: each an absolute path to an
// executable regular file, resolved (the kernel wall decides on the file,
// not the name). A pattern is refused: a plugin lists what it runs.
func programs(list []string) ([]string, error) {
	var out []string
	for _, prog := range list {
		if !filepath.IsAbs(prog) || strings.ContainsAny(prog, "*?[") {
			return nil, fmt.Errorf("%q: name one program by its absolute path, e.g. \"/usr/bin/jq\" (no patterns)", prog)
		}
		real, err := filepath.EvalSymlinks(prog)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", prog, err)
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%q (%s) is not an executable regular file", prog, real)
		}
		// Seed 004 §8.3: a plugin launches no shell, whatever it is
		// called (a symlink or copy of one is one).
		if sh, err := HostShells().Is(real); err != nil || sh != "" {
			if err == nil {
				err = fmt.Errorf("%w: %q is the shell %s; a plugin's only shell is its entry's #! interpreter", ErrShell, prog, sh)
			}
			return nil, err
		}
		out = append(out, real)
	}
	return out, nil
}

// interpreter reads a #! line and resolves its program.
func interpreter(entry string) (string, error) {
	fields, script, err := shebang.Read(entry)
	if err != nil || !script {
		return "", err
	}
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return "", fmt.Errorf("#! line %q names no absolute interpreter", strings.Join(fields, " "))
	}
	if filepath.Base(fields[0]) == "env" {
		return "", errors.New("#!/usr/bin/env is not allowed: name the interpreter's absolute path, so the scope can allow exactly it")
	}
	return filepath.EvalSymlinks(fields[0])
}

// LoadDir loads every plugin in the subdirectories of dir that hold a
// plugin.json. Two plugins of one name are refused.
func LoadDir(dir string) (map[string]*Plugin, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: plugins directory: %v", ErrManifest, err)
	}
	out := map[string]*Plugin{}
	for _, e := range ents {
		sub := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(sub, ManifestFile)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		p, err := Load(sub)
		if err != nil {
			return nil, err
		}
		if old, dup := out[p.Name]; dup {
			return nil, fmt.Errorf("%w: two plugins named %q: %s and %s", ErrManifest, p.Name, old.Dir, p.Dir)
		}
		out[p.Name] = p
	}
	return out, nil
}

// Names lists plugins' names, sorted.
func Names(ps map[string]*Plugin) []string {
	out := make([]string, 0, len(ps))
	for n := range ps {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Serves reports whether p lists capability.
func (p *Plugin) Serves(capability string) bool {
	for _, c := range p.Capabilities {
		if c == capability {
			return true
		}
	}
	return false
}
