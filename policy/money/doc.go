// Package money owns the integer money primitive of the cost path: an
// amount of minor units (cents, satoshis, wei) in an ISO 4217 (or crypto)
// currency, and the exact conversion between decimal strings and units.
//
// No float ever appears here. Parsing is exact: a decimal string with more
// fractional digits than its currency has minor units is an error
// (ErrPrecision), never a rounding. Arithmetic that would overflow uint64 or
// go below zero is an error (ErrOverflow), never a wrap. Mixing currencies is
// an error (ErrCurrencyMismatch).
package money
