// Package leaseapi is klock's KLIS-7 control plane: an HTTP+JSON server over
// a lease.Store (klockd serves it), its Go client (klock leases) and its
// OpenAPI description (openapi.yaml, served at GET /v1/openapi.yaml). An
// orchestrator that does not run its agents under klock coordinates with
// klock's sessions through it: the leases are the same ones.
//
// # Endpoints
//
//	POST /v1/manifest              acquire a manifest's intents, whole: GRANTED | DIE | WAIT
//	POST /v1/leases/heartbeat      renew sessions' leases (bulk: sessions and lease ids)
//	POST /v1/leases/release        free leases (by session or lease id)
//	POST /v1/leases/reconcile      which of the leases a client believes it holds are active
//	POST /v1/leases/revoke         free a lease or a session's leases (owner, or admin for any)
//	GET  /v1/leases                the leases the caller may see
//	GET  /v1/resource/{object}/state  the visible leases overlapping a URL-escaped KLIS object
//	GET  /v1/contention            recent ContentionDetected and the requests waiting now
//	GET  /v1/events                server-sent events: LeaseGranted, LeaseFreed, ContentionDetected
//	GET  /v1/openapi.yaml          this API's description
//
// A manifest request is KLIS's IntentManifest: {agent_id, session_id,
// intents}, each intent either the string form ("MUTATES FILE:/repo/src/**")
// or the map {subject, predicate, object, confidence, timestamp}, plus
// optional timestamp (the requester's Wait-Die age, ms since the epoch, kept
// across retries: every answer returns it), ttl_ms, grace_ms and
// wait_timeout_ms. GRANTED is 200 with one lease per leased intent (intents
// on nothing a lease covers, such as PROC objects, come back as "unleased"
// with the reason). DIE (KLIS-7's Denied) and WAIT are 409 with
// error_class "die" or "wait", the conflicts (the caller's intent, the held
// lease, and its holder unless it is another tenant's) and wait_time. With
// wait_timeout_ms an older requester's WAIT blocks up to that long and is
// retried, oldest waiter first, one at a time, whenever a lease is freed or
// the first conflicting lease may have run out; a DIE is answered at once
// (the requester must give up what it holds and retry later, keeping its
// timestamp).
//
// # Tenants
//
// The tenant of a request is who the transport proves the caller is, never
// what the body says:
//
//   - On the unix socket (Config.Group's members and root; the socket is
//     0660 root:<group>): the peer's uid from SO_PEERCRED (usock.PeerOf,
//     the same check klockd's session socket makes), tenant "uid:N". uid 0
//     is the admin: it sees and may free every tenant's leases. Any other
//     uid must be in the group, and a peer inside a klock session cgroup is
//     refused (an agent never drives klockd).
//   - On TCP (klockd --api-listen): a bearer token, looked up in constant
//     time in the tokens file ("TENANT TOKEN [admin]" lines); TLS is
//     required unless the address is loopback.
//
// A tenant sees only its own leases: another tenant's are absent from lists,
// states, reconciliations and the event stream, cannot be released or
// revoked (404 not_found: indistinguishable from a lease that does not
// exist), and appear in a conflict only redacted (predicate and expiry, no
// id, object or holder). Conflicts are still decided across tenants: they
// share the host's files. Acquires are rate-limited per tenant (token
// bucket: Config.Rate, Config.Burst); an over-limit acquire is 429
// rate_limited with retry_after_ms and a Retry-After header. A tenant may
// hold 32 event streams open (the 33rd is 429) and have 1024 acquires
// blocked waiting (beyond that a WAIT is answered at once).
//
// # Errors
//
// Every failure is the typed envelope klock's other HTTP surfaces use,
// {ok:false, error_class, retryable, message}, plus field (which part of the
// request is wrong: "intents[2].object") where the request is at fault and
// retry_after_ms for 429. Classes and statuses: bad_request 400,
// unauthorized 401, forbidden 403, not_found 404, method_not_allowed 405,
// too_large 413, die 409, wait 409, rate_limited 429, shutting_down 503,
// internal 500. The client returns them as *Error, which matches its class's
// sentinel with errors.Is (ErrForbidden, ErrNotFound, ...); DIE and WAIT are
// answers, not errors, for the client too (ManifestResponse.Outcome).
//
// # What it never does
//
// It never takes a tenant from the request body, never shows one tenant
// another's lease ids, holders or objects, and never retries a DIE for the
// caller.
package leaseapi
