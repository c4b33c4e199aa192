package core_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txkit/txkit/internal/core"
)

// A branch's call options (an HTTP participant's headers, its own call timeout) are stored with
// it, by Create with branches and by AddBranch alike, with and without group commit, and read
// back by Get; a branch without them stores none.
func TestIntegrationBranchCallOptions(t *testing.T) {
	ctx := t.Context()
	for _, opts := range [][]core.LogOption{nil, {core.WithGroupCommit(time.Millisecond)}} {
		l := newLog(t, opts...)
		a, b, c := httpBranch("a"), httpBranch("b"), httpBranch("c")
		a.Target.Header, a.Target.Timeout = http.Header{"X-Tenant": {"shop-1"}, "Accept-Language": {"de", "en"}}, 1500*time.Millisecond
		b.Seq, c.Seq = 1, 2
		c.Target.Timeout = 2 * time.Second
		if err := l.Create(ctx, "t1", core.KindTCC, time.Minute, nil, a, b); err != nil {
			t.Fatal(err)
		}
		if err := l.AddBranch(ctx, "t1", core.StatusTrying, c); err != nil {
			t.Fatal(err)
		}
		got := get(t, l, "t1").Branches
		if len(got) != 3 {
			t.Fatalf("branches %+v", got)
		}
		for i, want := range []core.Target{a.Target, b.Target, c.Target} {
			if !reflect.DeepEqual(got[i].Target, want) {
				t.Fatalf("branch %s: target %+v, want %+v", got[i].Name, got[i].Target, want)
			}
		}
	}
}

// CheckHeader refuses what may carry a credential or what the wire protocol sets, and takes the
// rest.
func TestCheckHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
		ok   bool
	}{
		{"none", nil, true},
		{"tenant", http.Header{"X-Tenant": {"a"}, "Accept-Language": {"de"}, "Idempotency-Key": {"k1"}, "X-Request-Id": {"r"}}, true},
		{"authorization", http.Header{"Authorization": {"Bearer x"}}, false},
		{"proxy authorization", http.Header{"Proxy-Authorization": {"Basic x"}}, false},
		{"cookie", http.Header{"Cookie": {"s=1"}}, false},
		{"api key", http.Header{"X-Api-Key": {"k"}}, false},
		{"token", http.Header{"X-Auth-Token": {"t"}}, false},
		{"lower-case secret", http.Header{"x-client-secret": {"s"}}, false},
		{"password", http.Header{"X-Password": {"p"}}, false},
		{"signing header", http.Header{"X-Txkit-Timestamp": {"1"}}, false},
		{"content type", http.Header{"Content-Type": {"text/plain"}}, false},
		{"traceparent", http.Header{"Traceparent": {"00-"}}, false},
		{"host", http.Header{"Host": {"evil"}}, false},
		{"bad name", http.Header{"X Tenant": {"a"}}, false},
		{"line break", http.Header{"X-Tenant": {"a\r\nX-Forged: 1"}}, false},
		{"too big", http.Header{"X-Big": {strings.Repeat("a", 5000)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := core.CheckHeader(tc.h); (err == nil) != tc.ok {
				t.Fatalf("CheckHeader(%v) = %v, want ok %v", tc.h, err, tc.ok)
			}
		})
	}
}
