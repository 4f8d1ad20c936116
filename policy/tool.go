package policy

import (
	"path"
	"strings"
)

// Tool is one declared tool: KCC surface 4 fields, the seven Tool Trust
// Contract properties of seed 002, and the category and capability code of
// seed 004.
type Tool struct {
	// KCC surface 4.
	Name string `yaml:"name" json:"name" jsonschema:"required"`
	// ToolName is seed 002's spelling of Name (tool: issue_refund).
	ToolName              string    `yaml:"tool" json:"-"`
	Type                  string    `yaml:"type" json:"type,omitempty" jsonschema:"enum=read,enum=write,enum=external,enum=internal"`
	BlastRadius           string    `yaml:"blast_radius" json:"blast_radius" jsonschema:"enum=read,enum=local,enum=domain,enum=organizational,description=missing: organizational (the widest)"`
	UntrustedContent      bool      `yaml:"untrusted_content" json:"untrusted_content,omitempty"`
	PrivateDataAccess     bool      `yaml:"private_data_access" json:"private_data_access,omitempty"`
	ExternalCommunication bool      `yaml:"external_communication" json:"external_communication,omitempty"`
	RateLimit             int       `yaml:"rate_limit" json:"rate_limit,omitempty" jsonschema:"description=requests per minute (KCC); see rate_limits for the full contract"`
	CostPerInvocation     *ToolCost `yaml:"cost_per_invocation" json:"cost_per_invocation,omitempty"`
	Version               Version   `yaml:"version" json:"version,omitempty"`
	Description           string    `yaml:"description" json:"description,omitempty"`
	Server                string    `yaml:"server" json:"server,omitempty" jsonschema:"description=MCP server or tool server id that provides the tool"`

	// Seed 004.
	Category   string `yaml:"category" json:"category,omitempty" jsonschema:"enum=A,enum=B,enum=C,enum=D"`
	Capability string `yaml:"capability" json:"capability,omitempty" jsonschema:"description=defaults to tool.<name>.invoke"`
	TimeoutMS  int    `yaml:"timeout_ms" json:"timeout_ms,omitempty" jsonschema:"description=defaults to the category's timeout"`

	// Tool Trust Contract (seed 002).
	Permission   Permission              `yaml:"permission" json:"permission,omitempty"`
	InputSchema  map[string]*ParamSchema `yaml:"input_schema" json:"input_schema,omitempty"`
	OutputSchema map[string]*ParamSchema `yaml:"output_schema" json:"output_schema,omitempty"`
	SideEffects  SideEffect              `yaml:"side_effects" json:"side_effects" jsonschema:"enum=READ,enum=REVERSIBLE-WRITE,enum=IRREVERSIBLE-WRITE,description=required once any contract property is declared; a KCC-only tool defaults to IRREVERSIBLE-WRITE"`
	Idempotency  Idempotency             `yaml:"idempotency" json:"idempotency,omitempty"`
	Rollback     Rollback                `yaml:"rollback" json:"rollback,omitempty"`
	RateLimits   RateLimits              `yaml:"rate_limits" json:"rate_limits,omitempty"`
	AuditLogging AuditLogging            `yaml:"audit_logging" json:"audit_logging,omitempty"`
	Autonomy     Autonomy                `yaml:"autonomy" json:"autonomy,omitempty"`

	// Touches are the KLIS intents a call of the tool has on this host's
	// files and endpoints (KLIS-6 §5): for the call's duration the gateway
	// holds them as leases, so a tool cannot change what an agent session
	// holds. Not declared, the tool is opaque and a call leases the
	// broadest scope (MUTATES of the workdir, CONSUMES for a READ tool);
	// an empty list declares it touches nothing here (an external API).
	// ${workdir} expands as in intents.
	Touches []Intent `yaml:"touches" json:"touches,omitempty" jsonschema:"description=KLIS intents a call touches on this host (e.g. [\"MUTATES FILE:${workdir}/db/**\"]): leased for the call's duration. Absent: opaque (a call leases MUTATES FILE:${workdir}/**; a READ tool CONSUMES). [] : touches nothing here. FILE and NET only"`

	// MaxConsecutiveErrors is seed 002's stopping rule: after this many
	// errors in a row in one run the tool is stopped for the run (0: the
	// default, 3).
	MaxConsecutiveErrors int `yaml:"max_consecutive_errors" json:"max_consecutive_errors,omitempty" jsonschema:"description=errors in a row after which the tool is stopped for the run (default 3)"`
}

// CapabilityCode returns the tool's capability, tool.<name>.invoke by default.
func (t *Tool) CapabilityCode() string {
	if t.Capability != "" {
		return t.Capability
	}
	return "tool." + t.Name + ".invoke"
}

// ToolCost is KCC's optional cost contribution: tokens or money.
type ToolCost struct {
	Tokens int    `yaml:"tokens" json:"tokens,omitempty"`
	Money  *Money `yaml:"money" json:"money,omitempty"`
}

// SideEffect is seed 002's classification by least reversible effect.
type SideEffect string

const (
	SideEffectRead              SideEffect = "READ"
	SideEffectReversibleWrite   SideEffect = "REVERSIBLE-WRITE"
	SideEffectIrreversibleWrite SideEffect = "IRREVERSIBLE-WRITE"
)

// Idempotent: calling the tool twice with the same arguments does it once
// (seed 002): a READ, or idempotency mode natural or key.
func (t *Tool) Idempotent() bool {
	return t.SideEffects == SideEffectRead || t.Idempotency.Mode == "natural" || t.Idempotency.Mode == "key"
}

// Permission: who the tool acts as and what it may touch (permission.go
// says what the entries of scope and forbidden mean).
type Permission struct {
	ActsAs    string         `yaml:"acts_as" json:"acts_as,omitempty" jsonschema:"description=the identity the tool acts as: passed to the tool with every call (MCP _meta klock/acts_as; a plugin's context.acts_as)"`
	Scope     PermissionList `yaml:"scope" json:"scope,omitempty"`
	Forbidden PermissionList `yaml:"forbidden" json:"forbidden,omitempty"`
}

// ParamSchema is one argument's type and constraints.
type ParamSchema struct {
	Type         string   `yaml:"type" json:"type" jsonschema:"required,enum=string,enum=number,enum=integer,enum=boolean,enum=enum,enum=array,enum=object,enum=path"`
	Required     *bool    `yaml:"required" json:"required,omitempty" jsonschema:"description=defaults to true"`
	Nullable     bool     `yaml:"nullable" json:"nullable,omitempty"`
	Min          *float64 `yaml:"min" json:"min,omitempty"`
	Max          *float64 `yaml:"max" json:"max,omitempty"`
	MinLength    *int     `yaml:"min_length" json:"min_length,omitempty"`
	MaxLength    *int     `yaml:"max_length" json:"max_length,omitempty"`
	Pattern      string   `yaml:"pattern" json:"pattern,omitempty"`
	Values       []string `yaml:"values" json:"values,omitempty"`
	MustMatch    string   `yaml:"must_match" json:"must_match,omitempty" jsonschema:"description=context binding, e.g. task.customer_id"`
	MustBelongTo string   `yaml:"must_belong_to" json:"must_belong_to,omitempty"`
	Description  string   `yaml:"description" json:"description,omitempty"`
	// Within is type path's containment: the directories the argument
	// must stay in as the tool will resolve it (cleaned, symlinks
	// followed). A pattern on a string cannot say this: "^/srv/data/"
	// matches "/srv/data/../etc/passwd".
	Within []string `yaml:"within" json:"within,omitempty" jsonschema:"description=type path only (required there): absolute directories (or ${workdir}/...) the path must stay in once cleaned and its symlinks resolved (e.g. [/srv/data])"`

	// Lookup names the READ tool that enforces MustBelongTo: the gateway
	// calls it with the owner argument, and this argument's value must be
	// in its result. Without it must_belong_to cannot be enforced.
	Lookup string `yaml:"lookup" json:"lookup,omitempty" jsonschema:"description=with must_belong_to: a declared READ tool taking the owner argument whose result lists this argument's values"`

	// Confidential marks the argument's value as confidential (seed 004
	// §11): no record keeps its plaintext, and in a confidential call the
	// tool receives an opaque handle in its place (guard/gateway).
	Confidential bool `yaml:"confidential" json:"confidential,omitempty" jsonschema:"description=type string only: records keep a handle (klock-handle:...) instead of the value; in a confidential call the tool receives the handle, never the plaintext"`
}

// TypePath is the input_schema type of a file path argument.
const TypePath = "path"

// WithinRoots returns s.Within with a leading ${workdir} expanded.
func (s *ParamSchema) WithinRoots(workdir string) []string {
	out := make([]string, 0, len(s.Within))
	for _, w := range s.Within {
		if rest, ok := strings.CutPrefix(w, WorkdirVar); ok {
			w = path.Clean(workdir + "/" + rest)
		}
		out = append(out, w)
	}
	return out
}

// IsRequired reports whether the argument must be present (default true).
func (p *ParamSchema) IsRequired() bool { return p.Required == nil || *p.Required }

// Idempotency: does calling twice do it twice?
type Idempotency struct {
	Mode      string `yaml:"mode" json:"mode,omitempty" jsonschema:"enum=natural,enum=key,enum=none"`
	KeySource string `yaml:"key_source" json:"key_source,omitempty"`
	Behavior  string `yaml:"behavior" json:"behavior,omitempty"`
}

// Rollback names the compensating action of a REVERSIBLE-WRITE.
type Rollback struct {
	Mechanism string `yaml:"mechanism" json:"mechanism,omitempty"`
	Window    string `yaml:"window" json:"window,omitempty"`
	Restores  string `yaml:"restores" json:"restores,omitempty"`
}

// RateLimits per run and per unit of time; PerArgument limits per value of
// one argument (seed 002's per_customer_per_day).
type RateLimits struct {
	PerRun      int                   `yaml:"per_run" json:"per_run,omitempty"`
	PerMinute   int                   `yaml:"per_minute" json:"per_minute,omitempty"`
	PerHour     int                   `yaml:"per_hour" json:"per_hour,omitempty"`
	PerDay      int                   `yaml:"per_day" json:"per_day,omitempty"`
	PerArgument map[string]RateLimits `yaml:"per_argument" json:"per_argument,omitempty"`
	// Scoped are seed 002's per_<key>_per_<window> fields as written;
	// Parse folds them into the fields above.
	Scoped []ScopedLimit `yaml:"-" json:"-"`
}

// AuditLogging: what each invocation's record holds and where it goes.
type AuditLogging struct {
	Records      []string `yaml:"records" json:"records,omitempty"`
	Destination  string   `yaml:"destination" json:"destination,omitempty"`
	Confidential bool     `yaml:"confidential" json:"confidential,omitempty" jsonschema:"description=store argument hashes and redact outputs (seed 004)"`
	// Redact are RE2 patterns: in a confidential call each match in the
	// tool's result text becomes [confidential section removed] (seed 004
	// §11) before the agent, the records or the idempotency store see it.
	Redact []string `yaml:"redact" json:"redact,omitempty" jsonschema:"description=RE2 patterns removed from the tool's text results in a confidential call (replaced by [confidential section removed])"`
}

// Autonomy is where the contract meets the autonomy ladder.
type Autonomy struct {
	// Unsupervised: always | never. Empty with UnsupervisedIf set means
	// conditional; empty without it defaults by side effect (READ: always).
	Unsupervised   string `yaml:"unsupervised" json:"unsupervised,omitempty" jsonschema:"enum=always,enum=never"`
	UnsupervisedIf string `yaml:"unsupervised_if" json:"unsupervised_if,omitempty" jsonschema:"description=CEL over the arguments (by name or args.x) and context.x; or seed 002's syntax (amount_usd <= 50 AND account.tier != enterprise)"`
	Else           string `yaml:"else" json:"else,omitempty" jsonschema:"default=ESCALATE"`
	// ElseNote is the text seed 002 writes after the verdict
	// ("ESCALATE for human approval"): kept for people, never parsed.
	ElseNote string `yaml:"-" json:"else_note,omitempty" jsonschema:"-"`
}
