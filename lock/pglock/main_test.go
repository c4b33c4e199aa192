package pglock_test

import (
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/locktest"
)

func TestMain(m *testing.M) {
	if locktest.IsWorker() {
		os.Exit(locktest.RunWorker(conformanceBackend))
	}
	testenv.VerifyNoLeaks(m)
}
