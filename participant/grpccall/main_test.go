package grpccall_test

import (
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if code, ok := testenv.RunWorker(envStarter, starter); ok {
		os.Exit(code)
	}
	testenv.VerifyNoLeaksWithExamples(m)
}
