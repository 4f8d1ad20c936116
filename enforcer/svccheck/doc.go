// Package svccheck owns what klock doctor says about klockd as a service:
// whether it is installed (its systemd units and binary), enabled (as
// systemctl says, when systemd is PID 1) and reachable (its socket
// answers a ps request).
//
// It only looks: nothing is started, enabled or changed. Each answer
// carries its reason as text; no error is returned, since "not installed"
// or "not running" is a finding, not a failure.
package svccheck
