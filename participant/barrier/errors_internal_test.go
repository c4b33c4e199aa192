package barrier

import (
	"fmt"
	"testing"

	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/internal/refusal"
)

// A 409's text says the refusal and its reason once, without the request's identifiers.
func TestRefusalText(t *testing.T) {
	req := participant.Request{GID: "g1", Branch: "pay", Op: participant.OpAction}
	for _, tc := range []struct {
		name         string
		err          error
		answer, kept string // the handler's text, and the reason HTTP.Do keeps of it
	}{
		{"bare", fmt.Errorf("participant: action g1/pay: %w", participant.ErrRefused), "participant: refused", ""},
		{"reason", fmt.Errorf("participant: action g1/pay: no funds: %w", participant.ErrRefused), "participant: refused: no funds", "no funds"},
		{"hanging", fmt.Errorf("participant: action g1/pay: %w", ErrHanging),
			"participant: refused: branch already cancelled (hanging try)", "branch already cancelled (hanging try)"},
		{"not from the barrier", fmt.Errorf("out of stock: %w", participant.ErrRefused), "participant: refused: out of stock", "out of stock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := refusalAnswer(req, tc.err)
			if got != tc.answer {
				t.Fatalf("refusalAnswer = %q, want %q", got, tc.answer)
			}
			if kept := refusal.Reason(got+"\n", participant.ErrRefused.Error()); kept != tc.kept {
				t.Fatalf("refusal.Reason(%q) = %q, want %q", got, kept, tc.kept)
			}
		})
	}
	if got := refusal.Reason("insufficient stock", participant.ErrRefused.Error()); got != "insufficient stock" { // another server's 409
		t.Fatalf("refusalReason of a plain text = %q", got)
	}
}
