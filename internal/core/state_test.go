package core_test

import (
	"errors"
	"testing"

	"github.com/txkit/txkit/internal/core"
)

func TestStatusTransitions(t *testing.T) {
	S := func(s core.Status) core.Status { return s }
	tests := []struct {
		name     string
		from, to core.Status
		ok       bool
	}{
		{"commit", core.StatusTrying, core.StatusConfirming, true},
		{"rollback", core.StatusTrying, core.StatusCancelling, true},
		{"confirmed", core.StatusConfirming, core.StatusConfirmed, true},
		{"cancelled", core.StatusCancelling, core.StatusCancelled, true},
		{"saga done", core.StatusRunning, core.StatusSucceeded, true},
		{"saga compensates", core.StatusRunning, core.StatusCompensating, true},
		{"saga compensated", core.StatusCompensating, core.StatusCompensated, true},
		{"no change of mind", core.StatusConfirming, core.StatusCancelling, false},
		{"no skipping the decision", core.StatusTrying, core.StatusConfirmed, false},
		{"final stays", core.StatusConfirmed, core.StatusCancelling, false},
		{"cancelled stays", core.StatusCancelled, core.StatusConfirming, false},
		{"kinds do not mix", core.StatusTrying, core.StatusSucceeded, false},
		{"unknown", S(0), core.StatusTrying, false},
		{"votes all yes, starter", core.StatusVoting, core.StatusConfirmed, true},
		{"votes all yes, leader", core.StatusVoting, core.StatusConfirming, true},
		{"a vote no", core.StatusVoting, core.StatusCancelling, true},
		{"no voting after trying", core.StatusTrying, core.StatusVoting, false},
		{"voting ends only by the votes", core.StatusVoting, core.StatusCancelled, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.from.CanBecome(tc.to); got != tc.ok {
				t.Fatalf("%s.CanBecome(%s) = %v, want %v", tc.from, tc.to, got, tc.ok)
			}
		})
	}
}

func TestStatusNames(t *testing.T) {
	tests := []struct {
		s     core.Status
		name  string
		final bool
	}{
		{core.StatusTrying, "trying", false},
		{core.StatusConfirming, "confirming", false},
		{core.StatusConfirmed, "confirmed", true},
		{core.StatusCancelling, "cancelling", false},
		{core.StatusCancelled, "cancelled", true},
		{core.StatusRunning, "running", false},
		{core.StatusCompensating, "compensating", false},
		{core.StatusCompensated, "compensated", true},
		{core.StatusSucceeded, "succeeded", true},
		{core.StatusVoting, "voting", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.s.String() != tc.name || tc.s.Final() != tc.final {
				t.Fatalf("%d: String %q Final %v, want %q %v", tc.s, tc.s.String(), tc.s.Final(), tc.name, tc.final)
			}
			back, err := core.ParseStatus(tc.name)
			if err != nil || back != tc.s {
				t.Fatalf("ParseStatus(%q) = %v, %v", tc.name, back, err)
			}
		})
	}
	if _, err := core.ParseStatus("nope"); !errors.Is(err, core.ErrInvalidState) {
		t.Fatalf("ParseStatus(nope) = %v, want ErrInvalidState", err)
	}
	if core.Status(0).Final() {
		t.Fatal("the zero Status is not final")
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		from    core.Status
		outcome core.Status
		branch  core.BranchStatus
		ok      bool
	}{
		{core.StatusConfirming, core.StatusConfirmed, core.BranchConfirmed, true},
		{core.StatusCancelling, core.StatusCancelled, core.BranchCancelled, true},
		{core.StatusRunning, core.StatusSucceeded, core.BranchSucceeded, true},
		{core.StatusCompensating, core.StatusCompensated, core.BranchCompensated, true},
		{core.StatusVoting, core.StatusConfirmed, core.BranchConfirmed, true}, // the starter commits once every branch voted yes
		{core.StatusTrying, 0, 0, false},
		{core.StatusConfirmed, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.from.String(), func(t *testing.T) {
			o, ok := tc.from.Outcome()
			b, bok := tc.from.BranchDone()
			if o != tc.outcome || ok != tc.ok || b != tc.branch || bok != tc.ok {
				t.Fatalf("Outcome = %v %v, BranchDone = %v %v", o, ok, b, bok)
			}
			if ok && !tc.from.CanBecome(o) {
				t.Fatalf("%s cannot become its own outcome %s", tc.from, o)
			}
			if ok && !core.BranchPending.CanBecome(b) && b != core.BranchCompensated {
				t.Fatalf("pending cannot become %s", b)
			}
		})
	}
}

func TestKindAndTargetNames(t *testing.T) {
	for _, k := range []core.Kind{core.KindTCC, core.KindSaga, core.Kind2PC} {
		back, err := core.ParseKind(k.String())
		if err != nil || back != k {
			t.Fatalf("ParseKind(%q) = %v, %v", k, back, err)
		}
	}
	if core.KindTCC.Initial() != core.StatusTrying || core.KindSaga.Initial() != core.StatusRunning {
		t.Fatal("initial statuses")
	}
	for _, k := range []core.TargetKind{core.TargetHTTP, core.TargetInProc, core.TargetGRPC} {
		back, err := core.ParseTargetKind(k.String())
		if err != nil || back != k {
			t.Fatalf("ParseTargetKind(%q) = %v, %v", k, back, err)
		}
	}
	if _, err := core.ParseTargetKind("amqp"); !errors.Is(err, core.ErrInvalidBranch) {
		t.Fatalf("ParseTargetKind(amqp) = %v", err)
	}
}
