// Package participant is both sides of a txkit branch: the wire protocol between a coordinator
// (tcc, saga) and its participants, the HTTP and in-process ways to call a participant, and the
// participant barrier that makes each operation run at most once in the participant's own
// database transaction.
//
// The protocol: the coordinator POSTs a JSON [Request] {"gid", "branch", "op", "payload"}; the
// participant answers 2xx for success, 409 ([StatusRefused]) for a business refusal — the global
// transaction is rolled back, never retried — and anything else means "try again later".
package participant
