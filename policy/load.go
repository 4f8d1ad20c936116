package policy

import (
	"fmt"
	"os"
	"path"
)

// Load reads, decodes and validates the manifest at file.
func Load(file string) (*Manifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return Parse(file, data)
}

// maxManifestBytes bounds the input; a real manifest is a few KiB.
const maxManifestBytes = 4 << 20

// Parse decodes and validates a manifest. file is used in positions only.
// The error, if any, is a *ValidationError listing every problem found.
func Parse(file string, data []byte) (*Manifest, error) {
	r := &report{file: file, pos: map[string]Pos{}}
	fail := func() (*Manifest, error) {
		return nil, &ValidationError{File: file, Diags: r.errors()}
	}
	if len(data) > maxManifestBytes {
		r.errorf("too-large", "", "keep a manifest under 4 MiB", "manifest is %d bytes", len(data))
		return fail()
	}
	root, diag := parseDocument(file, data)
	if diag != nil {
		r.diags = append(r.diags, *diag)
		return fail()
	}
	m := &Manifest{File: file, raw: data, pos: r.pos}
	d := &decoder{r: r}
	d.decode(root, reflectElem(m), "")
	if len(r.errors()) > 0 {
		return fail()
	}
	normalize(m, r)
	m.applyDefaults()
	validate(m, r)
	if len(r.errors()) > 0 {
		return fail()
	}
	m.Warnings = r.warnings()
	return m, nil
}

func (m *Manifest) applyDefaults() {
	if m.Mode == "" {
		m.Mode = ModeStrict
	}
	if m.Baseline == "" {
		m.Baseline = BaselineSystemRO
	}
	if m.HITL.DefaultMode == "" {
		m.HITL.DefaultMode = HITLModeHITL
	}
	if m.Tmp == "" {
		// Private by default, as systemd's PrivateTmp= and agent sandboxes
		// do: scratch files never reach the host's /tmp, never need a
		// lease, and two sessions never conflict there.
		m.Tmp = TmpPrivate
	}
	if m.Workdir != "" && path.IsAbs(m.Workdir) {
		m.Workdir = path.Clean(m.Workdir)
	}
	for i := range m.Intents {
		in := &m.Intents[i]
		if m.Workdir != "" && (in.Object.Type == ObjFile || in.Object.Type == ObjProc) {
			in.Object.Path = in.Object.Path.expandWorkdir(m.Workdir)
		}
	}
	for i := range m.DeclaredTools {
		for j := range m.DeclaredTools[i].Touches {
			in := &m.DeclaredTools[i].Touches[j]
			if m.Workdir != "" && in.Object.Type == ObjFile {
				in.Object.Path = in.Object.Path.expandWorkdir(m.Workdir)
			}
		}
	}
}

// has reports whether a field was written in the manifest.
func (m *Manifest) has(field string) bool {
	_, ok := m.pos[field]
	return ok
}
