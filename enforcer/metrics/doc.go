// Package metrics is klockd's Prometheus metrics (klockd --metrics-listen).
//
// # What it owns
//
//   - Its own prometheus.Registry (the Go and process collectors, and
//     klock's metrics below); nothing is registered globally.
//   - The /metrics listener: loopback, or TLS (Listen refuses any other
//     address with an *InsecureListenError).
//
// Data flows one way: klockd (enforcer/daemon) tells a Metrics what it
// already knows — a session was admitted, its agent is running, its
// session.Result — and Metrics reads the Result and its verification log
// (vlog.Log). The session package never imports this one.
//
// Labels carry only bounded values (modes, results, predicates, object
// types, actions, outcomes): never a path, a session id or an agent id.
//
// # Metrics
//
//	klock_sessions_active                          gauge
//	klock_sessions_total{mode,result}              counter
//	klock_session_start_seconds                    histogram
//	klock_violations_total{predicate,object_type,action} counter
//	klock_kernel_events_lost_total{backend}        counter
//	klock_kill_seconds                             histogram
//	klock_rollback_files_total{outcome}            counter
//	klock_leases_total{outcome}                    counter
//	klock_lease_wait_seconds                       histogram
//
// See docs/operations.md for what each means.
package metrics
