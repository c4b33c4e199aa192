package outbox

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestOutageRescue: the rows made due at the end of an outage are the failures, of at least two
// keys, that ended before the first acknowledged publish — those recorded in earlier batches and
// those that share the acknowledgement's batch (the recorder writes together the publishes that
// ended together: CI's TestIntegrationRelayOutageOver saw a:1, b:1, c:1 fail and d:1 succeed in
// one batch, and the three waited out their hour of backoff). Failures after it start the next.
func TestOutageRescue(t *testing.T) {
	fail := errors.New("broker away")
	invalid := fmt.Errorf("too big: %w", ErrInvalidMessage)
	rows := map[string]row{}
	for i, k := range []string{"a", "b", "c", "d", "p", "q"} {
		rows[k] = row{id: int64(i + 1), msg: Message{Key: k}}
	}
	type res struct {
		key string
		err error
	}
	split := func(rs []res) ([]row, []error) {
		var b []row
		var e []error
		for _, r := range rs {
			b, e = append(b, rows[r.key]), append(e, r.err)
		}
		return b, e
	}
	ids := func(keys ...string) []int64 {
		var out []int64
		for _, k := range keys {
			out = append(out, rows[k].id)
		}
		return out
	}
	tests := []struct {
		name       string
		earlier    [][]res // batches recorded before
		batch      []res
		want       []int64 // rescued by batch
		wantOutage []int64 // the outage after batch is recorded
	}{
		{"end shares the failures' batch", nil,
			[]res{{"a", fail}, {"b", fail}, {"c", fail}, {"d", nil}}, ids("a", "b", "c"), nil},
		{"end after the failures' batch", [][]res{{{"a", fail}, {"b", fail}, {"c", fail}}},
			[]res{{"d", nil}}, ids("a", "b", "c"), nil},
		{"failures over two batches", [][]res{{{"a", fail}}},
			[]res{{"b", fail}, {"d", nil}}, ids("a", "b"), nil},
		{"one key is no outage", nil,
			[]res{{"a", fail}, {"d", nil}}, nil, nil},
		{"no acknowledgement", [][]res{{{"a", fail}}},
			[]res{{"b", fail}, {"c", fail}}, nil, ids("a", "b", "c")},
		{"failures after the acknowledgement start the next", [][]res{{{"a", fail}, {"b", fail}}},
			[]res{{"d", nil}, {"p", fail}, {"q", fail}}, ids("a", "b"), ids("p", "q")},
		{"a message the broker can never carry is no outage", nil,
			[]res{{"a", fail}, {"p", invalid}, {"d", nil}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outage
			for _, rs := range tt.earlier {
				b, e := split(rs)
				if got := o.rescue(b, e); got != nil {
					t.Fatalf("an earlier batch rescued %v", got)
				}
				o.recorded(b, e)
			}
			b, e := split(tt.batch)
			got := slices.Clone(o.rescue(b, e))
			if !slices.Equal(got, tt.want) {
				t.Errorf("rescue = %v, want %v", got, tt.want)
			}
			o.recorded(b, e)
			if !slices.Equal(o.ids, tt.wantOutage) {
				t.Errorf("outage after the batch = %v, want %v", o.ids, tt.wantOutage)
			}
		})
	}
}
