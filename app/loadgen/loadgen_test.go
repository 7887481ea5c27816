package loadgen

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchEventIDs: a run's ids are a provider's shape and scattered (no
// two consecutive events share more than the type prefix and a chance
// character or two), and the same run and id repeat the same event, which
// is what makes a duplicate.
func TestBenchEventIDs(t *testing.T) {
	t.Parallel()
	type object struct {
		ID            string `json:"id"`
		PaymentIntent string `json:"payment_intent"`
	}
	var ev struct {
		ID   string `json:"id"`
		Data struct {
			Object object `json:"object"`
		} `json:"data"`
	}
	parse := func(b []byte) (string, string) {
		require.NoError(t, json.Unmarshal(b, &ev))
		return ev.ID, ev.Data.Object.PaymentIntent
	}
	require.Equal(t, benchEvent("run1", 7, true), benchEvent("run1", 7, true))
	id, pi := parse(benchEvent("run1", 7, true))
	require.Regexp(t, `^evt_[0-9a-f]{24}$`, id)
	require.Regexp(t, `^pi_[0-9a-f]{24}$`, pi)
	common := func(a, b string) int {
		n := 0
		for n < min(len(a), len(b)) && a[n] == b[n] {
			n++
		}
		return n
	}
	prevID, prevPI := id, pi
	shared := 0
	for i := int64(8); i < 1008; i++ {
		id, pi := parse(benchEvent("run1", i, true))
		shared = max(shared, common(id, prevID)-len("evt_"), common(pi, prevPI)-len("pi_"))
		prevID, prevPI = id, pi
	}
	require.Less(t, shared, 6, "consecutive ids share at most a chance few characters")
	other, _ := parse(benchEvent("run2", 7, true))
	require.NotEqual(t, id, other, "another run, other ids")
}
