package testenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// KnownGoroutines lists code whose goroutines may outlive a test: rocketmq-client-go v2.1.2 never
// stops some of its background loops after Shutdown (its issue #1147), its logger and cache keep
// goroutines of their own, and the runtime and testing packages run a few.
var KnownGoroutines = []string{
	"github.com/apache/rocketmq-client-go/v2",
	"github.com/patrickmn/go-cache",
	"gopkg.in/natefinch/lumberjack.v2",
	"github.com/sirupsen/logrus",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*M).startAlarm",
	"testing.runFuzzing",
}

// VerifyNoLeaks runs the tests of m and exits non-zero when goroutines other than the known ones
// ([KnownGoroutines]) are still running 5 seconds after the tests ended. Call it from TestMain.
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "testenv: %d goroutine(s) leaked by the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked waits up to grace for goroutines other than the caller's and the known ones to end, and
// returns the stacks of those still running.
func Leaked(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		leaked := unknownGoroutines()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func unknownGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	var out []string
	for i, s := range stacks {
		if i == 0 { // the caller's own goroutine
			continue
		}
		if known(s) {
			continue
		}
		out = append(out, s)
	}
	return out
}

func known(stack string) bool {
	for _, k := range KnownGoroutines {
		if strings.Contains(stack, k) {
			return true
		}
	}
	return false
}
