// Package mcp holds klock's gateway tests against real MCP servers (npm's
// @modelcontextprotocol/server-filesystem and server-everything) driven by
// the official Go SDK client through the klock binary, and the MCP
// conformance suite run directly and through the proxy. The npm packages
// are pinned in package.json / package-lock.json and installed by
// `scripts/deps.sh npm` (make test does it).
package mcp
