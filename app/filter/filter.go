// Package filter is the optional duplicate filter in front of Postgres. It
// may only save work: a mark says an event is committed in Postgres, so a
// later delivery can be answered without touching the database. Marks are
// written only after the commit, so a crash between the two can never make a
// provider's retry look like a duplicate; losing every mark (a flush, a
// restart) only sends duplicates the long way, to Postgres.
package filter

import "context"

// Filter remembers events already committed to Postgres.
//
// Implementations must be safe for concurrent use and must bound every call
// tightly: an error or a slow answer means "don't know", and the caller
// falls through to Postgres. No error may turn into a failed delivery.
type Filter interface {
	// Committed reports whether (provider, eventID) carries a committed mark.
	Committed(ctx context.Context, provider, eventID string) (bool, error)
	// MarkCommitted records that (provider, eventID) is committed. Call it
	// only after the Postgres commit.
	MarkCommitted(ctx context.Context, provider, eventID string) error
}
