package httpsafe

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestErrorHidesDetailAndLogsIt(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	w := httptest.NewRecorder()
	id := Error(w, log, 500, "registration failed", errors.New(`connect to user=postgres database=txkit_users host=10.0.0.7`))
	body := w.Body.String()
	if w.Code != 500 || !strings.Contains(body, "registration failed") || !strings.Contains(body, id) {
		t.Fatalf("answer %d %q, want 500 naming the message and id %s", w.Code, body, id)
	}
	for _, leak := range []string{"postgres", "txkit_users", "10.0.0.7"} {
		if strings.Contains(body, leak) {
			t.Errorf("answer %q carries %q", body, leak)
		}
	}
	if !strings.Contains(logs.String(), "request_id="+id) || !strings.Contains(logs.String(), "10.0.0.7") {
		t.Errorf("log %q lacks the id or the error", logs.String())
	}
	if a, b := RequestID(), RequestID(); a == b {
		t.Error("two request ids are equal")
	}
}
