// Package costreport reads the cost a tool reports for one call: a total
// ("0.12 USD" or {"units": 12, "currency": "USD"}) and, optionally, seed
// 003's breakdown (ToolInvocationCost.breakdown): tool-defined keys, each an
// amount. A breakdown is charged as its sum, so a tool cannot itemize more
// than it charges; when the tool also gives a total, the two must agree.
// The breakdown is kept as the tool sent it for the receipt (Chio copies it
// through into cost_breakdown).
//
// Error semantics: Read returns an error wrapping ErrCost that names the
// item at fault and the forms that are accepted; a caller treats such a
// cost as not reported (the reservation stands) or the answer as broken.
package costreport
