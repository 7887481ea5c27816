// Package jobs holds Guardian's River job arguments and workers: dispatch
// (one fulfilment's connector call) and the stale-dispatch sweep, plus the
// River client that runs them.
//
// # Dispatch
//
// A dispatch job claims its fulfilment (pending -> dispatching, taking the
// next attempt number) in a committed transaction before calling the
// connector, then moves it by the call's outcome with a conditional update
// naming the state and attempt it expects. A job that finds its fulfilment
// already dispatching (River retried it after a crash or a rescue) cannot
// know what the earlier attempt did: it parks the fulfilment as
// needs_reconciliation and calls nothing.
//
// # Sweep
//
// A periodic job, run by River on its elected leader only, moves fulfilments
// dispatching for longer than the dispatch lease to needs_reconciliation, so
// a dispatcher that died mid-call is noticed by a scan, not by an event a
// crash never sends.
package jobs
