// Package receiver is the receiver's side of Guardian's contract, for
// merchants whose receiver is written in Go: a correct receiver in a few
// lines (docs/receivers.md says what a receiver in any other language
// implements).
//
// A Receiver verifies Guardian's Standard Webhooks signature and timestamp,
// keeps every Idempotency-Key in the merchant's own Postgres (the table in
// Schema, created by Migrate), and runs the merchant's Handler inside the
// transaction that records the key. An action that is a write in that
// database therefore happens exactly once, with no unknown outcome at all:
// the key and the write commit together or not at all.
//
// # Two actions
//
// A Delivery whose Action is contract.ActionRevoke takes the payment back:
// a refund or dispute reversed a payment Guardian fulfilled, and Guardian's
// policy says to revoke what was granted (docs/design.md, "Taking back what
// was refunded or disputed"). It comes under a key of its own, at most once
// per payment, only after the payment's fulfilment was done; the Handler
// revokes inside the same transaction, so the revocation too happens
// exactly once, and declines (Decline) a revocation of something it never
// granted. A Delivery without an Action fulfils.
//
// # Answers
//
// The action endpoint (Action) answers, every answer but the first two
// signed with the connector secret (contract.Statement):
//
//   - 401: the signature or its timestamp is wrong. Guardian counts this
//     as "not delivered" and retries; nothing is recorded.
//   - 400: the body is not a Guardian request. Nothing is recorded.
//   - 200 "done", with a receipt: the handler ran and committed. The same
//     key again replays the stored answer, receipt included, and acts no
//     more.
//   - 409 "in_progress": a request with the key is being processed right
//     now (the IETF Idempotency-Key draft's answer). Guardian records the
//     outcome as unknown, never as done, and asks the lookup later.
//   - 422 "declined": the handler declined (Decline). Nothing was done, and
//     the key stays declined for good; Guardian marks the payment failed
//     and may send it later under the payment's next key.
//   - 422 "mismatch": the key was used before with another body.
//   - 500: the handler failed; the transaction was rolled back and nothing
//     was recorded, so a later attempt with the same key runs it again.
//
// The lookup endpoint (Lookup) answers GET .../{key} with a signed
// statement: "done", "declined", "in_progress" (the key's transaction is
// open) or "not_done" (no record, and nothing running).
//
// # Test deliveries
//
// `guardian connector test` checks a receiver against the contract with
// deliveries of event type contract.TestEventType under keys that start
// with contract.TestKeyPrefix. A Receiver never runs the merchant's
// handler for them: it records their keys like any other (so every rule
// above is exercised) and acts on nothing. A test delivery and a real key,
// or a real delivery and a test key, are refused with 400.
package receiver
