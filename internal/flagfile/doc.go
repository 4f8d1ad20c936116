// Package flagfile owns a command's configuration file: a YAML mapping of
// settings, each the value of one of the command's flags (klockd reads
// /etc/klock/klockd.yaml this way). A Key table maps the file's keys to
// flag names, so a flag becomes configurable by one more table row, and
// the file's values go through the flags' own parsers: the file and the
// command line cannot disagree on what a value means.
//
// The command line wins: Apply sets only the flags the command line left
// unset.
//
// # Errors
//
// Every error about the file is an *Error naming the file and, when it
// is about one place in it, its line; it wraps one of ErrSyntax (not
// YAML, or not a mapping of scalars and lists of scalars), ErrUnknownKey,
// ErrDuplicateKey or ErrBadValue (the flag's parser refused the value,
// which Error.Err also wraps).
package flagfile
