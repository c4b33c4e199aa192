package core_test

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/core"
)

// A transaction's record with its branches keeps every branch as given, whatever their count —
// a few as VALUES rows, more unnested from arrays (sql/queries.sql) — alone or grouped, and a gid
// taken records none of them.
func TestIntegrationCreateBranchCounts(t *testing.T) {
	ctx := t.Context()
	for _, opts := range [][]core.LogOption{nil, {core.WithGroupCommit(time.Millisecond)}} {
		l := newLog(t, opts...)
		for _, n := range []int{1, 3, 16, 17, 40} {
			gid := fmt.Sprint("n", n)
			bs := make([]core.Branch, n)
			for i := range bs {
				bs[i] = httpBranch(fmt.Sprint("s", i))
				bs[i].Seq = i
				if i%2 == 0 {
					bs[i].Payload = []byte(fmt.Sprintf(`{"i":%d}`, i))
				}
			}
			bs[n-1].Target.Header, bs[n-1].Target.Timeout = http.Header{"X-Tenant": {"t"}}, 1500*time.Millisecond
			if err := l.Create(ctx, gid, core.KindSaga, time.Minute, []byte(`{}`), bs...); err != nil {
				t.Fatalf("Create with %d branches: %v", n, err)
			}
			again := []core.Branch{httpBranch("other")}
			if err := l.Create(ctx, gid, core.KindSaga, time.Minute, nil, append(again, bs...)...); !errors.Is(err, core.ErrExists) {
				t.Fatalf("Create of %s again = %v, want ErrExists", gid, err)
			}
			got := get(t, l, gid)
			if len(got.Branches) != n {
				t.Fatalf("%s: %d branches, want %d", gid, len(got.Branches), n)
			}
			for i, b := range got.Branches {
				want := bs[i]
				if b.Name != want.Name || b.Seq != want.Seq || b.Status != core.BranchPending || string(b.Payload) != string(want.Payload) ||
					(b.Payload == nil) != (want.Payload == nil) || !reflect.DeepEqual(b.Target, want.Target) {
					t.Fatalf("%s: branch %d is %+v, want %+v", gid, i, b, want)
				}
			}
		}
	}
}

// Recording a saga of three steps (Create, alone: one statement) costs the Go process a bounded
// number of allocations, counted with testing.AllocsPerRun (every goroutine of the process). 55
// while the branches went as six arrays to unnest, which pgx encodes per call; 33 as VALUES rows
// of scalar parameters; 16 with those parameters pointing into the write instead of boxed (args.go).
func TestIntegrationCreateAllocs(t *testing.T) {
	ctx := t.Context()
	l := newLog(t)
	bs := []core.Branch{httpBranch("a"), httpBranch("b"), httpBranch("c")}
	for i := range bs {
		bs[i].Seq = i
	}
	gids := make([]string, 0, 210)
	for range cap(gids) {
		gids = append(gids, uuid.NewString())
	}
	allocs := testing.AllocsPerRun(200, func() {
		gid := gids[0]
		gids = gids[1:]
		if err := l.Create(ctx, gid, core.KindSaga, time.Minute, []byte(`{}`), bs...); err != nil {
			t.Fatal(err)
		}
	})
	const max = 20
	t.Logf("%.0f allocations per record", allocs)
	if allocs > max {
		t.Errorf("%.0f allocations per record of 3 branches, want at most %d", allocs, max)
	}
}

// AddBranches records all of its branches or none, whatever their count (as VALUES rows up to
// 16, unnested from arrays above), alone or grouped: none when one name is recorded already, none
// once the transaction is decided.
func TestIntegrationAddBranchesCounts(t *testing.T) {
	ctx := t.Context()
	for _, opts := range [][]core.LogOption{nil, {core.WithGroupCommit(time.Millisecond)}} {
		l := newLog(t, opts...)
		for _, n := range []int{2, 16, 17, 40} {
			gid := fmt.Sprint("t", n)
			if err := l.Create(ctx, gid, core.KindTCC, time.Minute, nil, httpBranch("first")); err != nil {
				t.Fatal(err)
			}
			bs := make([]core.Branch, n)
			for i := range bs {
				bs[i] = httpBranch(fmt.Sprint("s", i))
				bs[i].Seq = i + 1
				bs[i].Payload = []byte(fmt.Sprint(i))
			}
			bs[0].Target.Header = http.Header{"X-Tenant": {"t"}}
			clash := append(bs[1:len(bs):len(bs)], httpBranch("first"))
			if err := l.AddBranches(ctx, gid, core.StatusTrying, clash); !errors.Is(err, core.ErrInvalidBranch) {
				t.Fatalf("AddBranches with a name recorded = %v, want ErrInvalidBranch", err)
			}
			if got := get(t, l, gid).Branches; len(got) != 1 {
				t.Fatalf("%s: a refused AddBranches left %d branches", gid, len(got))
			}
			if err := l.AddBranches(ctx, gid, core.StatusTrying, bs); err != nil {
				t.Fatalf("AddBranches of %d: %v", n, err)
			}
			got := get(t, l, gid).Branches
			if len(got) != n+1 {
				t.Fatalf("%s: %d branches, want %d", gid, len(got), n+1)
			}
			for i, b := range got[1:] {
				want := bs[i]
				if b.Name != want.Name || b.Seq != want.Seq || b.Status != core.BranchPending || string(b.Payload) != string(want.Payload) ||
					!reflect.DeepEqual(b.Target, want.Target) {
					t.Fatalf("%s: branch %d is %+v, want %+v", gid, i, b, want)
				}
			}
			if _, err := l.Decide(ctx, gid, core.StatusTrying, core.StatusCancelling); err != nil {
				t.Fatal(err)
			}
			late := []core.Branch{httpBranch("late1"), httpBranch("late2")}
			if err := l.AddBranches(ctx, gid, core.StatusTrying, late); !errors.Is(err, core.ErrInvalidState) {
				t.Fatalf("AddBranches after the decision = %v, want ErrInvalidState", err)
			}
		}
	}
}
