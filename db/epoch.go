package db

import (
	"context"
)

// Epoch returns the database's epoch: a random name made at migration and
// changed only by RotateEpoch. The duplicate filter puts it in every Redis
// key, so its marks vouch for this database only.
func Epoch(ctx context.Context, q DBTX) (string, error) {
	var epoch string
	err := q.QueryRow(ctx, `SELECT epoch FROM guardian_epoch`).Scan(&epoch)
	return epoch, wrap("read epoch", err)
}

// RotateEpoch gives the database a new epoch and returns it. Run it after a
// point-in-time restore or a failover that may have lost committed events:
// every Redis mark written before it stops counting.
func RotateEpoch(ctx context.Context, q DBTX) (string, error) {
	var epoch string
	err := q.QueryRow(ctx, `UPDATE guardian_epoch SET epoch = replace(gen_random_uuid()::text, '-', ''), rotated_at = now() RETURNING epoch`).Scan(&epoch)
	return epoch, wrap("rotate epoch", err)
}
