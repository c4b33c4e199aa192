package leader_test

import (
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if code, ok := testenv.RunWorker(shardWorkerEnv, shardWorker); ok {
		os.Exit(code) // a worker process (shards_test.go)
	}
	testenv.VerifyNoLeaks(m)
}
