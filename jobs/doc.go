// Package jobs holds Guardian's River adapters: job arguments, workers whose
// Work calls the fulfilment domain (app/fulfilment), and the leader's
// periodic schedules. Nothing here decides a state: the adapters name the
// actor, trace, and translate the domain's answers into River's (retry,
// cancel).
//
// # Workers
//
//   - DispatchWorker runs one fulfilment's dispatch (claim, call, record).
//   - RouteWorker fetches the items of one purchase awaiting them from its
//     provider's API and routes it (fulfilment.Service.RouteAwaiting),
//     on its own queue, retried until the fetch succeeds.
//   - MaintainWorker, the one periodic adapter of the leader's maintenance
//     services (Maintainer), each doing one thing on its own interval,
//     under its own lock, counted under its own label: the four sweeps,
//     every SweepInterval (sweep_stale parks fulfilments whose dispatch
//     lease ran out, sweep_reversed takes back reversed payments whose
//     fulfilment settled, sweep_stranded gives stranded pending
//     fulfilments a job, sweep_awaiting gives a purchase awaiting its
//     items that no fetch tried lately a routing job), and the pruners,
//     every PruneInterval
//     (prune_tokens, prune_refusals, prune_transmissions, prune_bodies). A
//     slow delete never delays parking a stale claim.
//   - TallyWorker, every TallyInterval on the leader, folds the changes to
//     the settled states' counts and the dispatch outcomes into their tables
//     (db.FoldTally), so a read of the counts stays small whatever the
//     history holds.
//   - ReconcileWorker, every ReconcileInterval on the leader when the
//     connector can look up its keys, resolves parked fulfilments by lookup.
//   - BackfillWorker, on start and every BackfillInterval on the leader, for
//     each provider whose API credentials are configured (Stripe, Paddle,
//     PayPal), lists the events the provider could not deliver
//     (app/backfill) and passes each through intake, as a webhook.
//
// Periodic work (the tally's fold aside, which is safe twice at once) runs
// under a Guardian lock as well as River's leadership, so
// a round never overlaps itself across processes; the sweeps write under
// their lock's fencing number.
//
// # Inserting
//
// Enqueuer is an insert-only River client, built before the domain so the
// domain can enqueue inside its own transactions; Client is the working
// client, built after the domain so its workers can call it.
package jobs
