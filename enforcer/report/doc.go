// Package report owns the HTML session report (klock log ID --html): one
// self-contained page built from a verification log (enforcer/vlog) and,
// when the caller found them, the tool gateway's calls and spend for the
// session's run.
//
// The page fetches nothing: its Content-Security-Policy is default-src
// 'none' (styles inline, images data: only), it carries no script, and
// the timeline is inline SVG with a title, a description and a table of
// the same moments beside it, so a screen reader and a printout get what
// the picture shows. Every string of a log is named by the agent (paths,
// process names, commands): the page is rendered with html/template, whose
// contextual escaping keeps them text, never markup.
//
// It is downstream of vlog: nothing in the enforcement path imports it.
// It never reads files; the caller hands it the log and the guard records.
//
// Error semantics: HTML returns the writer's error, or the template's
// (wrapped with %w), and writes nothing useful after one.
package report
