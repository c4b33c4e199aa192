package participant

import (
	"fmt"
	"testing"
)

// A 409's text says the refusal and its reason once, without the request's identifiers.
func TestRefusalText(t *testing.T) {
	req := Request{GID: "g1", Branch: "pay", Op: OpAction}
	for _, tc := range []struct {
		name         string
		err          error
		answer, kept string // the handler's text, and the reason HTTP.Do keeps of it
	}{
		{"bare", fmt.Errorf("participant: action g1/pay: %w", ErrRefused), "participant: refused", ""},
		{"reason", fmt.Errorf("participant: action g1/pay: no funds: %w", ErrRefused), "participant: refused: no funds", "no funds"},
		{"hanging", fmt.Errorf("participant: action g1/pay: %w", ErrHanging),
			"participant: refused: branch already cancelled (hanging try)", "branch already cancelled (hanging try)"},
		{"not from the barrier", fmt.Errorf("out of stock: %w", ErrRefused), "participant: refused: out of stock", "out of stock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusal(req, tc.err)
			if got != tc.answer {
				t.Fatalf("refusal = %q, want %q", got, tc.answer)
			}
			if kept := refusalReason(got + "\n"); kept != tc.kept {
				t.Fatalf("refusalReason(%q) = %q, want %q", got, kept, tc.kept)
			}
		})
	}
	if got := refusalReason("insufficient stock"); got != "insufficient stock" { // another server's 409
		t.Fatalf("refusalReason of a plain text = %q", got)
	}
}
