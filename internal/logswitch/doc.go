// Package logswitch owns a slog.Handler whose format (text or JSON) and
// level can change while loggers made from it are in use: klockd's
// --log-format and --log-level, which SIGHUP re-reads without a restart.
// Loggers derived with With or WithGroup follow every change.
//
// Errors: ParseFormat and ParseLevel wrap ErrFormat and ErrLevel.
package logswitch
