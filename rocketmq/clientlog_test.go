package rocketmq_test

import (
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/txkit/txkit/rocketmq"
)

// SetClientLogger sets both of the client's process-wide hooks: its log lines and its recovered
// panics go to the logger given. (Not parallel: it changes process-wide state, restored after.)
func TestSetClientLogger(t *testing.T) {
	buf := &logBuffer{}
	prev := primitive.PanicHandler
	t.Cleanup(func() {
		primitive.PanicHandler = prev
		rlog.SetLogger(rocketmq.NewRlogAdapter(slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.LevelError))
	})
	rocketmq.SetClientLogger(slog.New(slog.NewTextHandler(buf, nil)), slog.LevelWarn)
	rlog.Info("chatty line", nil)
	rlog.Warning("route missing", map[string]any{"topic": "t"})
	if primitive.PanicHandler == nil {
		t.Fatal("SetClientLogger left primitive.PanicHandler nil")
	}
	primitive.PanicHandler("boom")
	got := buf.String()
	for _, want := range []string{`msg="route missing" topic=t`, `panic=boom`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatty line") {
		t.Errorf("an info line passed the warn level:\n%s", got)
	}
}
