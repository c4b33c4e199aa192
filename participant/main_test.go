package participant_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The Example functions run against the real PostgreSQL and cannot skip themselves: without a
	// server they panic, naming `make up`. Under -short with no server configured (make unit) they
	// are left out, just as the TestIntegration tests skip themselves there.
	if testing.Short() && os.Getenv(testenv.EnvPG) == "" {
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, "participant_test: set -test.skip:", err)
			os.Exit(2)
		}
	}
	testenv.VerifyNoLeaks(m)
}
