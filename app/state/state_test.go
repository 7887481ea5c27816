package state

import "testing"

func TestAllowed(t *testing.T) {
	t.Parallel()

	allowed := map[Transition]bool{}
	for _, tr := range Transitions {
		allowed[tr] = true
	}
	for _, from := range All {
		for _, to := range All {
			got := Allowed(from, to)
			if want := allowed[Transition{from, to}]; got != want {
				t.Errorf("Allowed(%s, %s) = %v, want %v", from, to, got, want)
			}
			if from.Terminal() && got {
				t.Errorf("terminal state %s has a way out to %s", from, to)
			}
		}
	}
	// The rules DESIGN.md states in words.
	tests := []struct {
		from, to State
		want     bool
	}{
		{Pending, Dispatching, true},
		{Pending, Fulfilled, false},
		{Dispatching, Dispatching, false},
		{NeedsReconciliation, Dispatching, false},
		{NeedsReconciliation, Failed, false},
		{Fulfilled, Pending, false},
		{Failed, Pending, false},
		{Cancelled, Pending, false},
	}
	for _, tt := range tests {
		if got := Allowed(tt.from, tt.to); got != tt.want {
			t.Errorf("Allowed(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
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
		{Rejected, Failed},
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
