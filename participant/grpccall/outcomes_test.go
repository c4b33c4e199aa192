package grpccall_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/core/coretest"
	"github.com/txkit/txkit/internal/testkit/grpctest"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/internal/testkit/zkenv"
	"github.com/txkit/txkit/participant"
	"github.com/txkit/txkit/participant/grpccall"
	"github.com/txkit/txkit/tcc"
)

// The rows of the outcome table (docs/participants.md): the codes a participant's method may
// answer, and what the coordinator does with each.
var (
	refusedCodes = []codes.Code{codes.Aborted, codes.FailedPrecondition}
	retriedCodes = []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Internal, codes.Unknown,
		codes.Canceled, codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated, codes.NotFound,
		codes.AlreadyExists, codes.OutOfRange, codes.DataLoss}
)

// TestIntegrationGRPCOutcomes: each status code of the table leads to its documented outcome. A
// try answered Aborted or FailedPrecondition is a refusal (the transaction is cancelled, the try
// not retried); every other code is an error: the try's caller gets it with its code, and a
// confirm answered with it is retried by the leader with backoff until it succeeds, the failed
// attempts and the last error (with the code) recorded on the branch. A confirm that can never
// succeed — its method does not exist (Unimplemented) — stays confirming, its attempts growing
// and the code in its last error. Each call carries the coordinator's call timeout as its gRPC
// deadline.
func TestIntegrationGRPCOutcomes(t *testing.T) {
	p := newParty(t)
	logs := testenv.PG(t)
	const callTimeout = 3 * time.Second
	c := coretest.New(t, tcc.New, logs.Pool, logs.Name, coretest.CallTimeout(callTimeout), coordinator.WithLease(200*time.Millisecond),
		coordinator.WithElector(zkenv.Elector(t, testenv.ZKRoot(t)+"/tcc", "leader")))
	h := coretest.Register(t, c, "party", p.caller(t, grpctest.TCC))
	missing, err := grpccall.New(p.Conn, grpccall.Methods{participant.OpTry: grpctest.Method(participant.OpTry),
		participant.OpConfirm: "/" + grpctest.Service + "/Missing", participant.OpCancel: grpctest.Method(participant.OpCancel)},
		grpccall.WithSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	hm := coretest.Register(t, c, "missing", missing)

	var mu sync.Mutex
	failures := map[string]int{}            // gid → confirms failed so far
	deadlines := map[string]time.Duration{} // gid → time left at the call
	p.SetHook(func(ctx context.Context, req participant.Request, value string) error {
		code, ok := strings.CutPrefix(value, "code:")
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(code)
		if err != nil {
			return err
		}
		cd := codes.Code(n)
		mu.Lock()
		defer mu.Unlock()
		if dl, ok := ctx.Deadline(); ok {
			deadlines[req.GID] = time.Until(dl)
		}
		switch {
		case req.Op == participant.OpTry && strings.HasPrefix(req.GID, "try-"):
			return status.Error(cd, "answered "+cd.String())
		case req.Op == participant.OpConfirm && failures[req.GID] < 3:
			failures[req.GID]++
			return status.Error(cd, "answered "+cd.String())
		}
		return nil
	})

	// Phase one: the try's caller gets the outcome at once.
	for _, cd := range append(append([]codes.Code{}, refusedCodes...), retriedCodes...) {
		g, err := c.Begin(t.Context(), coordinator.WithGID("try-"+cd.String()))
		if err != nil {
			t.Fatal(err)
		}
		err = g.Try(t.Context(), tcc.Branch{Name: "b", Participant: h, Payload: payload(t, "code:"+strconv.Itoa(int(cd)))})
		refused := errors.Is(err, participant.ErrRefused)
		switch want := status.Code(err); {
		case err == nil:
			t.Errorf("%s: Try succeeded", cd)
		case refused != (cd == codes.Aborted || cd == codes.FailedPrecondition):
			t.Errorf("%s: Try = %v, refused %v", cd, err, refused)
		case want != cd:
			t.Errorf("%s: Try's error has code %s: %v", cd, want, err)
		}
		if err := g.Rollback(t.Context()); err != nil {
			t.Fatalf("%s: Rollback: %v", cd, err)
		}
		if st := coretest.Status(t, c, g.GID()); st != tcc.StatusCancelled {
			t.Errorf("%s: status %s, want cancelled", cd, st)
		}
	}

	// Phase two: the leader retries with backoff until the confirm succeeds. A refusal of a
	// confirm breaks the protocol: it is retried too, and counted as a violation.
	testenv.Run(t, c.Run)
	var gids []string
	for _, cd := range append(append([]codes.Code{}, refusedCodes...), retriedCodes...) {
		g, err := c.Begin(t.Context(), coordinator.WithGID("confirm-"+cd.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Try(t.Context(), tcc.Branch{Name: "b", Participant: h, Payload: payload(t, "code:"+strconv.Itoa(int(cd)))}); err != nil {
			t.Fatalf("%s: Try: %v", cd, err)
		}
		if err := g.Commit(t.Context()); !errors.Is(err, coordinator.ErrIncomplete) {
			t.Errorf("%s: Commit = %v, want ErrIncomplete (the leader carries on)", cd, err)
		}
		gids = append(gids, g.GID())
	}
	stuck, err := c.Begin(t.Context(), coordinator.WithGID("stuck-unimplemented"))
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Try(t.Context(), tcc.Branch{Name: "b", Participant: hm, Payload: payload(t, "ok")}); err != nil {
		t.Fatal(err)
	}
	_ = stuck.Commit(t.Context())

	branch := func(gid string) (attempts int, lastErr string) {
		if err := logs.Pool.QueryRow(t.Context(), `select attempts, coalesce(last_error, '') from txkit_branch where gid = $1 and branch = 'b'`,
			gid).Scan(&attempts, &lastErr); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return attempts, lastErr
	}
	for _, gid := range gids {
		testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return coretest.Status(t, c, gid) == tcc.StatusConfirmed },
			"%s was not confirmed", gid)
		if n := p.Ledger(t, gid, "b", participant.OpConfirm); n != 1 {
			t.Errorf("%s: confirmed %d times, want once", gid, n)
		}
		if attempts, last := branch(gid); attempts != 3 || !strings.Contains(last, strings.TrimPrefix(gid, "confirm-")) {
			t.Errorf("%s: branch attempts %d, last error %q; want 3 and the code", gid, attempts, last)
		}
	}
	if v := c.Stats().Violations; v < int64(3*len(refusedCodes)) {
		t.Errorf("Violations = %d, want >= %d (refused confirms)", v, 3*len(refusedCodes))
	}
	var attempts int
	var last string
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		attempts, last = branch(stuck.GID())
		return attempts >= 3
	}, "the stuck branch's attempts do not grow")
	if st := coretest.Status(t, c, stuck.GID()); st != tcc.StatusConfirming || !strings.Contains(last, "Unimplemented") {
		t.Errorf("stuck: status %s, last error %q; want confirming and Unimplemented", st, last)
	}

	mu.Lock()
	defer mu.Unlock()
	for gid, left := range deadlines {
		if left <= 0 || left > callTimeout {
			t.Errorf("%s: the call's deadline was %v away, want within the call timeout %v", gid, left, callTimeout)
		}
	}
	if len(deadlines) == 0 {
		t.Error("no call carried a deadline")
	}
}
