package jobs

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempt int
		want    time.Duration // before the jitter, which takes up to a tenth off
	}{
		{1, time.Second},
		{2, 4 * time.Second},
		{3, 9 * time.Second},
		{10, 100 * time.Second},
		{17, 289 * time.Second},
		{18, MaxBackoff},
		{25, MaxBackoff},
		{1000, MaxBackoff},
	}
	for _, tt := range tests {
		for range 200 {
			if got := backoff(tt.attempt); got > tt.want || got < tt.want-tt.want/10 {
				t.Fatalf("backoff(%d) = %s, want within a tenth below %s", tt.attempt, got, tt.want)
			}
		}
	}
	// The jitter spreads jobs that failed together.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[backoff(25)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 backoffs of one attempt took %d values: no jitter", len(seen))
	}
}
