package outbox_test

import (
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(relayWorkerEnv); cfg != "" {
		os.Exit(runRelayWorker(cfg)) // a relay process started by startRelayWorker (failover_test.go)
	}
	testenv.VerifyNoLeaks(m)
}
