package db

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrPruned means an event's body was pruned after the payload retention:
// nothing that needs the body (a replay) can run.
var ErrPruned = errors.New("the event's body was pruned after GUARDIAN_PAYLOAD_RETENTION")

// bodyPrunable says, of an event e, that nothing can need its body again
// (PruneEventBodies): asked as its row is locked, and again after the
// lock is taken.
const bodyPrunable = `(e.pruned_at IS NULL
	-- The event's rows found by the event, each one's state by its id: on
	-- the view, a table of settled rows looked small enough to the planner
	-- to read whole into a hash, every round.
	AND NOT EXISTS (SELECT 1 FROM fulfilment_identity f
		CROSS JOIN LATERAL (SELECT m.state FROM fulfilment_move m WHERE m.id = f.id LIMIT 1) m
		WHERE f.event_pk = e.id AND m.state <> 'fulfilled')
	AND NOT EXISTS (SELECT 1 FROM purchase p WHERE p.provider = e.provider AND p.payment_id = e.payment_id AND p.awaiting_items IS NOT NULL)
	AND (e.reverses IS NULL OR NOT EXISTS (
		SELECT 1 FROM fulfilment_identity f WHERE f.provider = e.provider AND f.payment_id = e.reverses AND f.action = 'fulfil'
		  AND f.action_name = ANY(e.revokes) AND NOT f.failed -- declined: nothing to take back
		  -- Each half through its partial index: asked for in one, the
		  -- revocation was a scan of the table.
		  AND NOT EXISTS (SELECT 1 FROM fulfilment_identity v WHERE v.provider = f.provider AND v.payment_id = f.payment_id
			AND v.action_name = f.action_name AND v.action = 'revoke' AND NOT v.failed)
		  AND NOT EXISTS (SELECT 1 FROM fulfilment_identity v WHERE v.provider = f.provider AND v.payment_id = f.payment_id
			AND v.action_name = f.action_name AND v.action = 'revoke' AND v.failed))))`

// PruneEventBodies walks the stored events in id order from where the last
// walk stopped, at most limit of them, up to the first one seen at or after
// before, and empties the body of each one nothing can need again: no
// fulfilment of it that is not fulfilled (a pending, in-flight, parked,
// failed or cancelled row may yet be sent, retried or reopened, and every
// attempt under a key sends the same body), none of a purchase awaiting
// its items (its fulfilments are made from it once they come), and, for a
// reversal, its payment's revocation made for each action it takes back
// that has a fulfilment (until then the sweep may make one from it). The event's
// identity stays, so a late delivery is still a duplicate. It returns how
// many bodies it emptied and whether the walk reached before (or the end):
// false means call again.
//
// The bodies are emptied under FOR UPDATE, skipping rows another
// transaction holds: a fulfilment being created from an event holds it
// (the foreign key's KEY SHARE), and db.InsertFulfilments takes that lock
// itself and skips an event pruned meanwhile, so no fulfilment is ever made
// from an emptied body. A row skipped now stays behind the walk, unpruned.
func (s *Store) PruneEventBodies(ctx context.Context, before time.Time, limit int) (pruned int, done bool, err error) {
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		pruned, done, err = PruneEventBodiesIn(ctx, tx, before, limit)
		return err
	})
	return pruned, done, wrap("prune event bodies", err)
}

// PruneEventBodiesIn is one step of Store.PruneEventBodies in tx.
//
// The walk reads the events alone; what can still need a body is weighed
// only of the events it found old, named by id. Weighed in the walk
// itself, as once it was, the planner costed the check per row of the
// whole index scan, not of the LIMIT, and read every fulfilment not
// fulfilled into a hash each round: a scan of the table, 250 ms a batch
// at a million payments (TestPruneReadsItsBatch).
func PruneEventBodiesIn(ctx context.Context, tx pgx.Tx, before time.Time, limit int) (pruned int, done bool, err error) {
	var cursor int64
	if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT last_id FROM prune_cursor WHERE name = 'event_body' FOR UPDATE), 0)`).Scan(&cursor); err != nil {
		return 0, false, err
	}
	rows, err := tx.Query(ctx, `
		SELECT e.id, e.first_seen_at < $2 AS old
		FROM webhook_event e WHERE e.id > $1 ORDER BY e.id LIMIT $3`, cursor, before, limit)
	if err != nil {
		return 0, false, err
	}
	var ids []int64
	walked, last := 0, cursor
	for rows.Next() {
		var id int64
		var old bool
		if err := rows.Scan(&id, &old); err != nil {
			return 0, false, err
		}
		if !old {
			done = true
			break
		}
		walked, last = walked+1, id
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	if walked < limit {
		done = true
	}
	if len(ids) > 0 {
		// Lock those nothing seems to need, then look again in a
		// statement of its own: its snapshot, taken after the locks, sees
		// every fulfilment whose creator let go of the row first; a
		// creator still holding it was skipped, and one that comes after
		// waits, then finds the event pruned and makes nothing.
		rows, err := tx.Query(ctx, `SELECT e.id FROM webhook_event e WHERE e.id = ANY($1) AND `+bodyPrunable+` ORDER BY e.id FOR UPDATE OF e SKIP LOCKED`, ids)
		if err != nil {
			return 0, false, err
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return 0, false, err
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_event e SET body = '', pruned_at = now() WHERE e.id = ANY($1) AND `+bodyPrunable, locked)
		if err != nil {
			return 0, false, err
		}
		pruned = int(tag.RowsAffected())
		// A purchase's detail (the customer's email among it) goes with
		// the last body of its payment.
		if _, err := tx.Exec(ctx, `
			UPDATE purchase p SET detail = NULL
			FROM (SELECT DISTINCT provider, payment_id FROM webhook_event WHERE id = ANY($1) AND payment_id IS NOT NULL) pe
			WHERE p.provider = pe.provider AND p.payment_id = pe.payment_id AND p.detail IS NOT NULL
			  AND NOT EXISTS (SELECT 1 FROM webhook_event e WHERE e.provider = p.provider AND e.payment_id = p.payment_id AND e.pruned_at IS NULL)`,
			locked); err != nil {
			return 0, false, err
		}
	}
	if last != cursor {
		_, err = tx.Exec(ctx, `INSERT INTO prune_cursor (name, last_id) VALUES ('event_body', $1)
			ON CONFLICT (name) DO UPDATE SET last_id = excluded.last_id`, last)
	}
	return pruned, done, err
}
