package mcpproxy

import (
	"encoding/json"
	"net/http"
)

// Seed 002's permission.acts_as travels to the tool with every call the
// gateway lets through, so the server can act in that identity's security
// context: in the tools/call params' _meta under MetaActsAs (MCP reserves
// _meta for such metadata; "klock/" is klock's prefix), and over
// streamable HTTP also in the HeaderActsAs request header. The gateway
// sets both from the manifest and removes any the client sent: an agent
// cannot claim an identity, and a tool declared without one receives none.
const (
	MetaActsAs   = "klock/acts_as"
	HeaderActsAs = "Klock-Acts-As"
)

// actsAs is the identity the tool declared ("" for none or an undeclared
// tool, whose call is refused anyway).
func (p *Proxy) actsAs(tool string) string {
	t, ok := p.gw.Pipeline().Tool(tool)
	if !ok {
		return ""
	}
	return t.Permission.ActsAs
}

// stamp returns the tools/call frame raw with params._meta's MetaActsAs
// set to the called tool's identity (or removed); every other byte of
// params is kept. A frame it cannot read is returned as is: the gateway
// refuses the call before it is sent.
func (p *Proxy) stamp(raw []byte) []byte {
	var frame map[string]json.RawMessage
	if json.Unmarshal(raw, &frame) != nil {
		return raw
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(frame["params"], &params) != nil || params == nil {
		return raw
	}
	var name string
	_ = json.Unmarshal(params["name"], &name)
	var meta map[string]json.RawMessage
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return raw // not an object: MCP's schema refuses it upstream
	}
	_, claimed := meta[MetaActsAs]
	who := p.actsAs(name)
	if who == "" && !claimed {
		return raw
	}
	delete(meta, MetaActsAs)
	if who != "" {
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		meta[MetaActsAs], _ = json.Marshal(who)
	}
	if len(meta) == 0 {
		delete(params, "_meta")
	} else {
		params["_meta"], _ = json.Marshal(meta)
	}
	frame["params"], _ = json.Marshal(params)
	out, err := json.Marshal(frame)
	if err != nil {
		return raw
	}
	return out
}

// setActsAs sets (or removes) the identity header of an upstream request.
func setActsAs(h http.Header, who string) {
	h.Del(HeaderActsAs)
	if who != "" {
		h.Set(HeaderActsAs, who)
	}
}

// callee is the identity of the tool a tools/call message names.
func (p *Proxy) callee(m message) string {
	name, _, _ := decodeCall(m.Params)
	return p.actsAs(name)
}
