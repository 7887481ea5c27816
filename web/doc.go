// Package web is Guardian's HTTP face, on Echo: webhook intake at
// POST /webhooks/{provider}, and /healthz and /readyz.
//
// What a client sees is kept apart from what the log gets (HTTPError): an
// answer names the problem in a few words and never carries internals,
// secrets or expected signatures. No 2xx is sent before the event is
// committed to Postgres; when Postgres cannot be reached the answer is 503,
// so the provider retries.
package web
