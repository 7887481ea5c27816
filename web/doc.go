// Package web is Guardian's HTTP face, on Echo: thin adapters that parse a
// request, call the fulfilment domain (app/fulfilment) and turn its answer
// into a status code. They decide nothing themselves.
//
//   - POST /webhooks/{provider}: verify the signature over the raw,
//     size-capped body, then fulfilment.Service.Accept; refused deliveries
//     are recorded (app/refusals) and limited per client address.
//   - /api/v1 (bearer token): list and read fulfilments and events, resolve a
//     parked fulfilment, replay a stored event, stats; answers use this
//     package's own wire types (Fulfilment, Event, ...), never the database's.
//   - / (signed-in session): the dashboard; resolutions confirm through a
//     single-use token. /riverui/ behind the same session.
//   - /healthz, /readyz, POST /tokens/{token}/redeem. /metrics and pprof
//     are not here: they are on the operations listener, which the wiring
//     serves apart (GUARDIAN_METRICS_ADDR, loopback by default).
//
// What a client sees is kept apart from what the log gets (HTTPError): an
// answer names the problem in a few words and never carries internals,
// secrets or expected signatures. No 2xx is sent before the event is
// committed to Postgres; when Postgres cannot be reached the answer is 503,
// so the provider retries.
package web
