package signing

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestVerifyRequest(t *testing.T) {
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
		err := VerifyRequest(tc.r, body, []string{"new", "old"}, now, 5*time.Minute)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: verify = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	if err := VerifyRequest(req("new", now, "/n", body), []byte(`{"id":"y"}`), []string{"new"}, now, time.Minute); err == nil {
		t.Error("a changed body verified")
	}
}

func TestVerifyResponse(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"key":"k"}`)
	answer := func(key string, status int, target string, b []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, "http://h"+target, nil)
		resp := &http.Response{StatusCode: status, Header: http.Header{}, Request: req}
		SetResponseHeaders(resp.Header, req, key, now, status, b)
		return resp
	}
	for _, tc := range []struct {
		name string
		resp *http.Response
		ok   bool
	}{
		{"signed answer", answer("new", 200, "/q?key=k", body), true},
		{"old key", answer("old", 200, "/q?key=k", body), true},
		{"unknown key", answer("other", 200, "/q?key=k", body), false},
		{"status changed", func() *http.Response { r := answer("new", 404, "/q?key=k", body); r.StatusCode = 200; return r }(), false},
		{"answer to another question", func() *http.Response {
			r := answer("new", 200, "/q?key=other", body)
			r.Request.URL.RawQuery = "key=k"
			return r
		}(), false},
		{"unsigned", func() *http.Response { r := answer("new", 200, "/q?key=k", body); r.Header = http.Header{}; return r }(), false},
		{"no request", func() *http.Response { r := answer("new", 200, "/q?key=k", body); r.Request = nil; return r }(), false},
	} {
		err := VerifyResponse(tc.resp, body, []string{"new", "old"}, now, time.Minute)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: VerifyResponse = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	// A request signature never verifies as a response (and so cannot be replayed as one).
	req, _ := http.NewRequest(http.MethodGet, "http://h/q", nil)
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Request: req}
	resp.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	resp.Header.Set(HeaderSignature, Sign("new", now.Unix(), http.MethodGet, "/q", body))
	if err := VerifyResponse(resp, body, []string{"new"}, now, time.Minute); err == nil {
		t.Error("a request signature verified as a response")
	}
}

func TestCheckSecrets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secrets []string
		ok      bool
	}{
		{"none", nil, false},
		{"short", []string{"short"}, false},
		{"one good, one short", []string{"0123456789abcdef", "x"}, false},
		{"good", []string{"0123456789abcdef"}, true},
		{"two good", []string{"0123456789abcdef", "fedcba9876543210-old"}, true},
	} {
		if err := CheckSecrets(tc.secrets); (err == nil) != tc.ok {
			t.Errorf("%s: CheckSecrets = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// A request's Idempotency-Key is part of its signature: it cannot be added, changed or dropped
// by someone without the secret, and a keyed signature is not an unkeyed one.
func TestVerifyKeyedRequest(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	signed := func(key string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://h/api/outbox/dead/x/requeue", nil)
		if key != "" {
			r.Header.Set(HeaderIdempotencyKey, key)
		}
		SignRequest(r, "0123456789abcdef", now, nil)
		return r
	}
	with := func(r *http.Request, key string) *http.Request {
		if key == "" {
			r.Header.Del(HeaderIdempotencyKey)
		} else {
			r.Header.Set(HeaderIdempotencyKey, key)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"keyed", signed("k-1"), true},
		{"unkeyed", signed(""), true},
		{"key changed", with(signed("k-1"), "k-2"), false},
		{"key added", with(signed(""), "k-2"), false},
		{"key dropped", with(signed("k-1"), ""), false},
		{"key with a line break", with(signed("k-1"), "k-1\nx"), false},
	} {
		err := VerifyRequest(tc.r, nil, []string{"0123456789abcdef"}, now, time.Minute)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("%s: VerifyRequest = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
