package notify

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"x"}`)
	req := func(key string, ts time.Time, target string, b []byte) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://h"+target, bytes.NewReader(b))
		r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		r.Header.Set(HeaderSignature, Sign(key, ts.Unix(), http.MethodPost, target, b))
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"current key", req("new", now, "/n", body), true},
		{"old key during rotation", req("old", now, "/n", body), true},
		{"unknown key", req("other", now, "/n", body), false},
		{"stale", req("new", now.Add(-6*time.Minute), "/n", body), false},
		{"from the future", req("new", now.Add(6*time.Minute), "/n", body), false},
		{"edge of the window", req("new", now.Add(-5*time.Minute), "/n", body), true},
		{"signed for another path", func() *http.Request { r := req("new", now, "/other", body); r.URL.Path = "/n"; return r }(), false},
		{"no timestamp", func() *http.Request { r := req("new", now, "/n", body); r.Header.Del(HeaderTimestamp); return r }(), false},
		{"no signature", func() *http.Request { r := req("new", now, "/n", body); r.Header.Del(HeaderSignature); return r }(), false},
	} {
		err := verify(tc.r, body, []string{"new", "old"}, now, 5*time.Minute)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: verify = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	if err := verify(req("new", now, "/n", body), []byte(`{"id":"y"}`), []string{"new"}, now, time.Minute); err == nil {
		t.Error("a changed body verified")
	}
}
