package policy

// APIVersion is the only manifest version this package reads.
const APIVersion = "klock/v1"

// Manifest is one agent's declaration: who it is, what it may touch in the
// kernel (intents), which tools it may call and under which contracts, and
// what it may spend. It merges KCC surfaces 1, 4, 5 and 6, KLIS intents,
// Tool Trust Contracts (seed 002) and Chio grants (seed 003).
type Manifest struct {
	APIVersion    string        `yaml:"apiVersion" json:"apiVersion" jsonschema:"enum=klock/v1"`
	Agent         Agent         `yaml:"agent" json:"agent"`
	Mode          Mode          `yaml:"mode" json:"mode,omitempty" jsonschema:"enum=strict,enum=permissive,default=strict"`
	Workdir       string        `yaml:"workdir" json:"workdir,omitempty" jsonschema:"description=absolute directory the agent works in; ${workdir} in intents expands to it"`
	Baseline      Baseline      `yaml:"baseline" json:"baseline,omitempty" jsonschema:"enum=system-ro,enum=none,default=system-ro"`
	Intents       []Intent      `yaml:"intents" json:"intents"`
	DeclaredTools []Tool        `yaml:"declared_tools" json:"declared_tools,omitempty"`
	CostEnvelope  *CostEnvelope `yaml:"cost_envelope" json:"cost_envelope"`
	Grants        []Grant       `yaml:"grants" json:"grants,omitempty"`
	// Rates names the rates file (seed 003's rate source) the grants'
	// cross-currency charges convert with, relative to the manifest's
	// directory; klock's --rates overrides it.
	Rates string `yaml:"rates" json:"rates,omitempty" jsonschema:"description=rates file for cross-currency charges (each rate with its source and time), relative to the manifest"`
	HITL  HITL   `yaml:"hitl" json:"hitl,omitempty"`
	// Network limits what the session's traffic may amount to.
	Network *Network `yaml:"network" json:"network,omitempty"`
	// Tmp says whose /tmp and /var/tmp the agent sees: its session's own
	// (private, the default) or the host's (host).
	Tmp       Tmp        `yaml:"tmp" json:"tmp,omitempty" jsonschema:"enum=private,enum=host,default=private,description=private: the agent's /tmp and /var/tmp are its session's own (intents there take no lease and no backup); host: the host's (a socket or file shared with another process)"`
	Signature *Signature `yaml:"signature" json:"signature,omitempty"`

	// Warnings found while loading; never fatal.
	Warnings []Diagnostic `yaml:"-" json:"-"`
	// File is the path the manifest was read from.
	File string `yaml:"-" json:"-"`

	raw []byte         // the bytes as read, for signature verification
	pos map[string]Pos // field path -> position
}

// Pos returns the position of a field path (or its nearest parent).
func (m *Manifest) Pos(field string) Pos {
	r := report{file: m.File, pos: m.pos}
	return r.lookup(field)
}

// Agent is KCC surface 1: identity.
type Agent struct {
	ID         string  `yaml:"id" json:"id" jsonschema:"required"`
	Name       string  `yaml:"name" json:"name,omitempty"`
	Version    Version `yaml:"version" json:"version,omitempty"`
	Capability string  `yaml:"capability" json:"capability,omitempty"`
	Maturity   string  `yaml:"maturity" json:"maturity,omitempty" jsonschema:"enum=L1,enum=L2,enum=L3"`
	Owner      Owner   `yaml:"owner" json:"owner,omitempty"`
	CreatedAt  string  `yaml:"created_at" json:"created_at,omitempty"`
}

// Owner names who answers for the agent.
type Owner struct {
	Team    string `yaml:"team" json:"team,omitempty"`
	Contact string `yaml:"contact" json:"contact,omitempty"`
}

// Mode is the escalation policy of KLIS-6 §3.2.
type Mode string

const (
	ModeStrict     Mode = "strict"
	ModePermissive Mode = "permissive"
)

// Baseline names a set of read-only system paths a program needs to run at all.
type Baseline string

const (
	BaselineSystemRO Baseline = "system-ro"
	BaselineNone     Baseline = "none"
)

// Tmp is the manifest's tmp field.
type Tmp string

const (
	// TmpPrivate: the agent's /tmp and /var/tmp are directories of its
	// session's own, bind-mounted over them in its mount namespace.
	TmpPrivate Tmp = "private"
	// TmpHost: the agent sees the host's /tmp and /var/tmp.
	TmpHost Tmp = "host"
)

// PrivateTmpRoot holds the sessions' private /tmp and /var/tmp on the
// host: <PrivateTmpRoot>/<session>/tmp and .../vartmp.
const PrivateTmpRoot = "/var/lib/klock/tmp"

// TmpDirs are the directories a private tmp replaces, as the agent names
// them.
var TmpDirs = []string{"/tmp", "/var/tmp"}

// TmpdirVar expands to /tmp (the agent's, private or not) in FILE: and
// PROC: objects.
const TmpdirVar = "${tmpdir}"

// InTmp reports whether the clean absolute path p is /tmp, /var/tmp or
// below one of them.
func InTmp(p string) bool {
	for _, d := range TmpDirs {
		if p == d || len(p) > len(d) && p[:len(d)] == d && p[len(d)] == '/' {
			return true
		}
	}
	return false
}

// PrivateTmp reports whether a session of m gives the agent a /tmp and a
// /var/tmp of its own: unless the manifest says tmp: host, or its workdir
// is in the host's /tmp or /var/tmp (the agent must see its workdir, so
// it sees the host's /tmp there).
func (m *Manifest) PrivateTmp() bool {
	return m.Tmp == TmpPrivate && !(m.Workdir != "" && InTmp(m.Workdir))
}

// TmpNote says whose /tmp a session of m gives the agent, for klock
// explain and the like.
func (m *Manifest) TmpNote() string {
	switch {
	case m.PrivateTmp():
		return "private /tmp and /var/tmp (host path " + PrivateTmpRoot + "/<session>/tmp and .../vartmp; klock run --keep-tmp keeps them): intents there take no lease and back nothing up"
	case m.Tmp == TmpHost:
		return "the host's /tmp and /var/tmp (tmp: host): intents there are leased and backed up"
	default:
		return "the host's /tmp and /var/tmp (the workdir is in one): intents there are leased and backed up"
	}
}

// HITLMode is KCC surface 6.
type HITLMode string

const (
	HITLModeHITL HITLMode = "HITL"
	HITLModeHOTL HITLMode = "HOTL"
)

// Network holds the limits of the session's network traffic, enforced
// by its packet wall (enforcer/netwall).
type Network struct {
	// MaxEgressBytes is the session's budget of bytes sent out (every
	// declared peer's, the loopback relays' included): past it the packet
	// wall drops what the agent sends, and a strict session is killed.
	MaxEgressBytes int64 `yaml:"max_egress_bytes" json:"max_egress_bytes,omitempty" jsonschema:"minimum=1,description=the session's budget of bytes sent out: past it the packet wall drops the agent's packets and a strict session is killed (an exfiltration budget)"`
}

// EgressBudget is m's network.max_egress_bytes, 0 when none.
func (m *Manifest) EgressBudget() uint64 {
	if m == nil || m.Network == nil || m.Network.MaxEgressBytes <= 0 {
		return 0
	}
	return uint64(m.Network.MaxEgressBytes)
}

// HITL is KCC surface 6: human in or on the loop.
type HITL struct {
	DefaultMode    HITLMode `yaml:"default_mode" json:"default_mode,omitempty" jsonschema:"enum=HITL,enum=HOTL,default=HITL"`
	RevokeTriggers []string `yaml:"revoke_triggers" json:"revoke_triggers,omitempty"`
	// MaintainerApproval is required to run HOTL with an organizational tool.
	MaintainerApproval *Approval `yaml:"maintainer_approval" json:"maintainer_approval,omitempty"`
	// ApprovalTimeoutSeconds: a pending approval is denied after this long.
	ApprovalTimeoutSeconds int `yaml:"approval_timeout_seconds" json:"approval_timeout_seconds,omitempty"`
}

// Approval records who approved what.
type Approval struct {
	ApprovedBy string `yaml:"approved_by" json:"approved_by" jsonschema:"required"`
	Reference  string `yaml:"reference" json:"reference,omitempty"`
	Date       string `yaml:"date" json:"date,omitempty"`
	// PublicKey and Signature make the approval a maintainer's signature
	// (klock sign --maintainer), not free text: launch checks the key is
	// trusted (see ApprovalKey).
	PublicKey string `yaml:"public_key" json:"public_key,omitempty"`
	Signature string `yaml:"signature" json:"signature,omitempty"`
}

// Signature is an ed25519 signature over the manifest's canonical form
// (RFC 8785 JSON of the document without this field).
type Signature struct {
	Algorithm string `yaml:"algorithm" json:"algorithm" jsonschema:"enum=ed25519"`
	PublicKey string `yaml:"public_key" json:"public_key"`
	Value     string `yaml:"value" json:"value"`
	// Fields are short digests of each field at signing time (see
	// ChangedFields): outside the signed bytes, they only locate a change.
	Fields map[string]string `yaml:"fields" json:"fields,omitempty"`
}
