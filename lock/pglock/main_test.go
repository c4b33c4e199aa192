package pglock_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/lock/locktest"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(envDoWorker); url != "" {
		if err := doWorker(url); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(1)
	}
	if locktest.IsWorker() {
		os.Exit(locktest.RunWorker(conformanceBackend))
	}
	testenv.VerifyNoLeaks(m)
}
