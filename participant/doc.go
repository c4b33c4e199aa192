// Package participant is the wire protocol between a coordinator (tcc, saga, twopc, threepc) and
// its participants, and the ways to call a participant: over HTTP ([HTTP], signed by the client of
// [NewSigningClient]) or in-process ([Participant], [ParticipantFunc]); over gRPC with package
// participant/grpccall (the answers mean the same: docs/participants.md).
//
// The protocol: the coordinator POSTs a JSON [Request] {"gid", "branch", "op", "payload"} (plus a
// random "nonce" that participants ignore) to the branch's URL — every op of a branch to the same
// URL; the participant answers 2xx for success, 409 ([StatusRefused]) for a business refusal —
// the global transaction is rolled back, never retried — and anything else means "try again
// later". [HTTP.Do] sends the W3C trace context of its ctx, so the participant's span joins the
// coordinator's trace.
//
// The coordinator side signs every request with a shared secret (HMAC-SHA256 over the timestamp,
// the method, the target and the body, in [HeaderTimestamp] and [HeaderSignature]), with one
// client set once on the coordinator, which every call of a branch's [HTTP] without a Client goes
// through (its first op as well as the recovery's):
//
//	client, _ := participant.NewSigningClient(secret, &http.Client{Timeout: 10 * time.Second})
//	c, _ := tcc.New(pool, coordinator.WithHTTPClient(client)) // branches: participant.HTTP{URL: stockURL}
//
// The participant side lives in two packages of its own:
//
//   - participant/barrier runs each op of a branch at most once in the participant's own
//     database transaction (empty rollbacks, hanging tries, nonces) and serves it over HTTP
//     with signatures verified, or in-process; participant/grpcbarrier serves it over gRPC;
//   - threepc/agent ends, alone, the three-phase-commit branches whose coordinator went silent.
//
// Signing proves who sent a request, not that nobody read it; docs/security.md says how to add
// TLS, or use mutual TLS instead, and how to rotate the key. Neither the signing client nor an
// HTTP with a nil Client follows redirects, which would re-post a signed request wherever a
// Location header points.
package participant
