package db

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// History is one fulfilment as an operator reads it: the row, the event
// that made it, its transitions and its lookups, all as of one moment.
type History struct {
	Fulfilment  Fulfilment
	Event       Event
	Transitions []Transition
	Checks      []Check
}

// FulfilmentHistory reads a fulfilment's History in one read-only
// snapshot, so the row and its timeline never disagree (read one by one, a
// move landing between the reads showed a state the timeline did not
// reach). ErrNotFound for an unknown id.
func FulfilmentHistory(ctx context.Context, pool *pgxpool.Pool, id string) (History, error) {
	var h History
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if h.Fulfilment, err = GetFulfilment(ctx, tx, id); err != nil {
			return err
		}
		if h.Event, err = GetEventByPK(ctx, tx, h.Fulfilment.EventPK); err != nil {
			return err
		}
		if h.Transitions, err = Transitions(ctx, tx, id); err != nil {
			return err
		}
		h.Checks, err = Checks(ctx, tx, id)
		return err
	})
	return h, err
}
