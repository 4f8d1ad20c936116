// Package metrics is klockd's Prometheus metrics (klockd --metrics-listen).
//
// # What it owns
//
//   - Its own prometheus.Registry (the Go and process collectors, and
//     klock's metrics below); nothing is registered globally.
//   - The /metrics listener: loopback, or TLS (Listen refuses any other
//     address with an *InsecureListenError).
//   - Leases, a decorator of lease.Store that counts the store's
//     decisions and keeps its optional interfaces (lease.Awaiter,
//     Subscriber), so that other decorators compose with it.
//   - EnableBPFStats: the kernel's BPF run-time statistics, on while the
//     returned Closer is open, and a collector that reads the programs'
//     statistics at scrape time (klockd --metrics-bpf-stats).
//
// Data flows one way: klockd (enforcer/daemon) tells a Metrics what it
// already knows — a session was admitted, its agent is running, its
// session.Result — and Metrics reads the Result and its verification log
// (vlog.Log). The session package never imports this one. The guard's
// metrics (GuardDecision, ApprovalsPending, BudgetSpent, TokensMetered)
// take plain values, from the records the tool gateways publish.
//
// Labels carry only bounded values (kinds, modes, results, predicates,
// object types, actions, outcomes, backends, program names; operators'
// grant ids and currencies capped by a boundedSet): never a path, a
// session id or an agent id. A value outside a label's set is "other".
//
// # Errors
//
// Metrics record and never fail: a nil *Metrics records nothing. Listen
// returns *InsecureListenError or a wrapped listen error; EnableBPFStats
// a wrapped error when the kernel refuses BPF_ENABLE_STATS.
//
// # Metrics
//
//	klock_sessions_active{kind}                              gauge
//	klock_sessions_total{kind,mode,result}                   counter
//	klock_session_start_seconds{kind}                        histogram
//	klock_violations_total{predicate,object_type,action}     counter
//	klock_kill_seconds                                       histogram
//	klock_kernel_events_total{backend}                       counter
//	klock_kernel_events_lost_total{backend}                  counter
//	klock_rollback_files_total{outcome}                      counter
//	klock_rollback_bytes_total                               counter
//	klock_rollback_seconds                                   histogram
//	klock_lease_decisions_total{outcome}                     counter
//	klock_lease_grants_total                                 counter
//	klock_lease_conflicts_total                              counter
//	klock_lease_revocations_total                            counter
//	klock_lease_store_errors_total{op}                       counter
//	klock_lease_denied_sessions_total                        counter
//	klock_lease_wait_seconds                                 histogram
//	klock_bpf_program_run_seconds_total{backend,program}     counter
//	klock_bpf_program_runs_total{backend,program}            counter
//	klock_bpf_program_recursion_misses_total{backend,program} counter
//	klock_guard_decisions_total{outcome}                     counter
//	klock_approvals_pending                                  gauge
//	klock_budget_spent_minor_units_total{grant,currency}     counter
//	klock_tokens_metered_total{kind}                         counter
//
// See docs/operations.md for what each means, and
// deploy/grafana/klock-dashboard.json for a dashboard of them.
package metrics
