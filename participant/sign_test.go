package participant_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/txkit/txkit/participant"
)

func TestNewSigningClient(t *testing.T) {
	if _, err := participant.NewSigningClient("short", nil); !errors.Is(err, participant.ErrInvalidOption) {
		t.Fatalf("a 5-byte secret: %v; want ErrInvalidOption", err)
	}
	base := &http.Client{Timeout: 7 * time.Second}
	c, err := participant.NewSigningClient(testSecret, base)
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeout != base.Timeout || c.CheckRedirect == nil {
		t.Fatalf("client: timeout %v, redirect check %v; want the base's timeout and no redirects", c.Timeout, c.CheckRedirect != nil)
	}
	if base.Transport != nil || base.CheckRedirect != nil {
		t.Fatal("NewSigningClient changed its base client")
	}
}
