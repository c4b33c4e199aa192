package app

import (
	"fmt"
	"strconv"
)

// Mode is the protocol an order runs under: one TCC global transaction, one saga, or one workflow.
type Mode uint8

// The modes.
const (
	ModeTCC      Mode = iota + 1 // try (reserve, freeze) everywhere, then confirm all or cancel all
	ModeSaga                     // deduct stock, then debit money; a refusal compensates what was done
	ModeWorkflow                 // the saga's steps as a Go function (package workflow), replayed after a crash
)

var modeNames = map[Mode]string{ModeTCC: "tcc", ModeSaga: "saga", ModeWorkflow: "workflow"}

// Modes returns every mode.
func Modes() []Mode { return []Mode{ModeTCC, ModeSaga, ModeWorkflow} }

// String returns the mode's name ("tcc", "saga", "workflow").
func (m Mode) String() string {
	if s, ok := modeNames[m]; ok {
		return s
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode reads a mode's name.
func ParseMode(s string) (Mode, error) {
	for m, n := range modeNames {
		if n == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mode %q: want tcc, saga or workflow", s)
}

// Set reads the mode of a flag (flag.Value).
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err == nil {
		*m = v
	}
	return err
}

// MarshalText writes the mode's name.
func (m Mode) MarshalText() ([]byte, error) {
	if _, ok := modeNames[m]; !ok {
		return nil, fmt.Errorf("mode %d: unknown", m)
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads the mode's name.
func (m *Mode) UnmarshalText(b []byte) error { return m.Set(string(b)) }
