// Package mcpproxy owns the MCP proxy: it sits between an MCP client and a
// real MCP server, over stdio (newline-delimited JSON-RPC, the server is a
// child process) or streamable HTTP (a reverse proxy in front of the
// server's endpoint).
//
// It looks at two methods only and passes everything else through as the
// bytes it received, so protocol features it does not know keep working:
//
//   - tools/list responses are filtered to the declared tools (the
//     cheapest control is the tool never registered);
//   - tools/call requests go through guard/gateway: a refusal comes back as
//     a CallToolResult with isError true whose structuredContent (and text)
//     is the typed error {ok:false, error_class, retryable, message}; an
//     allowed call is forwarded and its result returned, with nulls in
//     structuredContent replaced by the MISSING sentinel. A forwarded call
//     carries the tool contract's permission.acts_as in its params' _meta
//     ("klock/acts_as"; over HTTP also the Klock-Acts-As header), set by
//     the proxy and never the client's (identity.go).
//
// Error semantics: a malformed frame from the client is answered with a
// JSON-RPC parse error (-32700) and never forwarded; the proxy stops when
// either side closes. Serve returns the first I/O error.
package mcpproxy
