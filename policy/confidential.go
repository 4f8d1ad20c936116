package policy

import (
	"regexp"
	"sort"
)

// ConfidentialArgs are the names of the arguments t's input_schema marks
// confidential, sorted.
func (t *Tool) ConfidentialArgs() []string {
	var out []string
	for name, p := range t.InputSchema {
		if p != nil && p.Confidential {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// validateConfidential: a confidential argument is a string (its handle
// is one), is never a per-argument rate-limit key (the rate state would
// keep its plaintext), and audit_logging.redact holds RE2 patterns.
func validateConfidential(t *Tool, f string, r *report) {
	for _, name := range t.ConfidentialArgs() {
		pf := f + ".input_schema." + name
		if typ := t.InputSchema[name].Type; typ != "string" {
			r.errorf("confidential", pf+".confidential", "mark only string arguments confidential (the tool receives a string handle in their place)", "%s is of type %s", name, typ)
		}
		if _, ok := t.RateLimits.PerArgument[name]; ok {
			r.errorf("confidential", f+".rate_limits.per_argument."+name, "limit per another argument, or drop confidential", "a per-argument limit on a confidential argument would keep its plaintext in the rate state")
		}
	}
	for i, pat := range t.AuditLogging.Redact {
		if pat == "" {
			r.errorf("format", f+".audit_logging.redact", "write an RE2 regular expression", "pattern %d is empty", i)
		} else if _, err := regexp.Compile(pat); err != nil {
			r.errorf("format", f+".audit_logging.redact", "write an RE2 regular expression", "%v", err)
		}
	}
}
