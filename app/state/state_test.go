package state

import "testing"

// TestAllowed holds the transition table to the rules docs/design.md
// states in words, written out here by hand as every pair that may move,
// not derived from Transitions.
func TestAllowed(t *testing.T) {
	t.Parallel()

	may := map[string]bool{
		"pending->dispatching":              true, // claim
		"pending->cancelled":                true, // reversed before it went out
		"pending->needs_reconciliation":     true, // reversed before it went out, by the rows: asked
		"dispatching->fulfilled":            true, // connector said done
		"dispatching->needs_reconciliation": true, // outcome unknown
		"dispatching->failed":               true, // the receiver declined the key, signed
		"dispatching->pending":              true, // provably not sent or not delivered
		"needs_reconciliation->fulfilled":   true, // a fact: done
		"needs_reconciliation->pending":     true, // a fact: not done
		"needs_reconciliation->cancelled":   true, // an operator's final word
		"needs_reconciliation->failed":      true, // the receiver's signed word: declined, or not done after a refusal
		"cancelled->needs_reconciliation":   true, // an audited reopening
	}
	n := 0
	for _, from := range All {
		for _, to := range All {
			want := may[string(from)+"->"+string(to)]
			if got := Allowed(from, to); got != want {
				t.Errorf("Allowed(%s, %s) = %v, want %v", from, to, got, want)
			}
			if want {
				n++
			}
			if from.Terminal() && want {
				t.Errorf("terminal state %s has a way out to %s", from, to)
			}
		}
	}
	if n != len(may) {
		t.Errorf("%d of the hand-written moves name states that do not exist", len(may)-n)
	}
}

func TestAfterDispatch(t *testing.T) {
	t.Parallel()

	tests := []struct {
		outcome Outcome
		want    State
	}{
		{Done, Fulfilled},
		{NotSent, Pending},
		{Declined, Failed},
		{Refused, NeedsReconciliation},
		{NotDelivered, Pending},
		{Unknown, NeedsReconciliation},
	}
	for _, tt := range tests {
		got := AfterDispatch(tt.outcome)
		if got != tt.want {
			t.Errorf("AfterDispatch(%s) = %s, want %s", tt.outcome, got, tt.want)
		}
		if !Allowed(Dispatching, got) {
			t.Errorf("AfterDispatch(%s) = %s is not an allowed move from dispatching", tt.outcome, got)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()

	for _, st := range All {
		got, err := Parse(string(st))
		if err != nil || got != st {
			t.Errorf("Parse(%q) = %q, %v", st, got, err)
		}
	}
	if _, err := Parse("done"); err == nil {
		t.Error("Parse(\"done\") accepted an unknown state")
	}
}
