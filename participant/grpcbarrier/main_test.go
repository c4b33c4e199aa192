package grpcbarrier_test

import (
	"testing"

	"github.com/txkit/txkit/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
