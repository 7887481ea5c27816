package fulfilment

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The sweep's revocation catch-all reads every reversed payment at the
// first round a database sees and once every FullTakeBackEvery; in
// between, the payments settled since the last committed round, less the
// overlap.
func TestTakeBackWindow(t *testing.T) {
	var w takeBackWindow
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	require.True(t, w.since(t0).IsZero(), "the first round reads everything")
	w = w.after(t0, time.Time{})
	next := t0.Add(30 * time.Second)
	require.Equal(t, t0.Add(-takeBackOverlap), w.since(next), "then the work since the last round")
	// A round that failed records nothing: the next reads from the same place.
	require.Equal(t, t0.Add(-takeBackOverlap), w.since(next.Add(30*time.Second)))
	w = w.after(next, t0.Add(-takeBackOverlap))
	require.Equal(t, next.Add(-takeBackOverlap), w.since(next.Add(30*time.Second)))
	require.True(t, w.since(t0.Add(FullTakeBackEvery)).IsZero(), "everything again once the full round is due")
}
