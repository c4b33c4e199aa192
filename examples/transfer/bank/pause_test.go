package main

import (
	"log/slog"
	"testing"
	"time"
)

// TestPauseHookPhases: -pause-at takes the protocol's names of the point before the decision
// (prepared for 2pc, precommitted for 3pc), decided and both; anything else is refused, and a
// zero rate installs no hook.
func TestPauseHookPhases(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		protocol, at string
		rate         float64
		ok, hook     bool
	}{
		{"2pc", "prepared", 0.5, true, true},
		{"2pc", "decided", 0.5, true, true},
		{"2pc", "both", 0.5, true, true},
		{"2pc", "precommitted", 0.5, false, false},
		{"3pc", "precommitted", 0.5, true, true},
		{"3pc", "decided", 0.5, true, true},
		{"3pc", "both", 0.5, true, true},
		{"3pc", "prepared", 0.5, false, false},
		{"3pc", "both", 0, true, false},
		{"3pc", "both", 1.5, false, false},
	} {
		t.Run(tc.protocol+"/"+tc.at, func(t *testing.T) {
			h, err := pauseHook(tc.protocol, tc.rate, time.Millisecond, tc.at, log)
			if (err == nil) != tc.ok || (h != nil) != tc.hook {
				t.Fatalf("pauseHook(%s, %v, %s) = hook %v, %v; want ok %v, hook %v", tc.protocol, tc.rate, tc.at, h != nil, err, tc.ok, tc.hook)
			}
		})
	}
}

// TestPauseHookSleepsOnlyAtItsPhase: a hook for "decided" at rate 1 sleeps at decided and not at
// the other phases (cancommitted, precommitted).
func TestPauseHookSleepsOnlyAtItsPhase(t *testing.T) {
	const d = 50 * time.Millisecond
	h, err := pauseHook("3pc", 1, d, "decided", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"cancommitted", "precommitted", "decided"} {
		start := time.Now()
		if err := h(t.Context(), "g", phase); err != nil {
			t.Fatal(err)
		}
		if slept := time.Since(start) >= d; slept != (phase == "decided") {
			t.Fatalf("at %s: slept %v", phase, slept)
		}
	}
}
