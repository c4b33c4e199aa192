package leader_test

import (
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testenv"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(shardWorkerEnv); cfg != "" {
		os.Exit(runShardWorker(cfg)) // a worker process started by startShardWorker (shards_test.go)
	}
	testenv.VerifyNoLeaks(m)
}
