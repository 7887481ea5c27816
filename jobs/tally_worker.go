package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// TallyArgs asks for one fold of the counts' changes.
type TallyArgs struct{}

// Kind names the job in River.
func (TallyArgs) Kind() string { return "guardian_tally" }

// InsertOpts puts folds on the maintenance queue, without retries: the
// next period folds what this one did not.
func (TallyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1}
}

// TallyFolder folds the changes to the settled states' counts and the
// dispatch outcomes into their tables (db.Store.FoldTally), returning how
// many it folded.
type TallyFolder interface {
	FoldTally(ctx context.Context) (int64, error)
}

// TallyInterval is how often the leader folds: a read of the counts sums
// at most this long's changes.
const TallyInterval = 10 * time.Second

// TallyWorker folds the counts' changes on the leader. It does one
// thing, apart from the sweep and the pruning: a count read stays exact
// whether or not it runs (a read sums the tally and the changes not yet
// folded), and only grows slower while it does not. Two folds at once are
// safe, so it takes no lock.
type TallyWorker struct {
	river.WorkerDefaults[TallyArgs]

	folder TallyFolder
	logger *slog.Logger
}

// Work folds once.
func (w *TallyWorker) Work(ctx context.Context, _ *river.Job[TallyArgs]) error {
	n, err := w.folder.FoldTally(ctx)
	if err != nil {
		return err
	}
	w.logger.DebugContext(ctx, "tally: folded changes", "changes", n)
	return nil
}
