package saga

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// TestEncodeMeta: the hand-written meta reads back as json.Marshal's does (names that need
// escaping go through json.Marshal), and a sequential saga's costs one allocation (issue 33: 8
// with json.Marshal of the map).
func TestEncodeMeta(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []*step
	}{
		{"no deps", []*step{{name: "a"}, {name: "b"}}},
		{"chain", []*step{{name: "s1"}, {name: "s2", deps: []string{"s1"}}, {name: "s3", deps: []string{"s2"}}}},
		{"diamond", []*step{{name: "a"}, {name: "b", deps: []string{"a"}}, {name: "c", deps: []string{"a"}}, {name: "d", deps: []string{"c", "b"}}}},
		{"escaped", []*step{{name: `a"<é>`}, {name: "b\\", deps: []string{`a"<é>`}}, {name: "c", deps: []string{"b\\"}}}},
	} {
		got, err := encodeMeta(tc.steps)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := meta{Deps: map[string][]string{}}
		for _, st := range tc.steps {
			if len(st.deps) > 0 {
				want.Deps[st.name] = st.deps
			}
		}
		var m meta
		if err := json.Unmarshal(got, &m); err != nil {
			t.Fatalf("%s: %s: %v", tc.name, got, err)
		}
		if len(want.Deps) == 0 && m.Deps != nil || !maps.EqualFunc(m.Deps, want.Deps, slices.Equal) {
			t.Errorf("%s: %s reads as %v, want %v", tc.name, got, m.Deps, want.Deps)
		}
	}
	chain := []*step{{name: "s1"}, {name: "s2", deps: []string{"s1"}}, {name: "s3", deps: []string{"s2"}}}
	if got, _ := encodeMeta(chain); string(got) != `{"deps":{"s2":["s1"],"s3":["s2"]}}` {
		t.Errorf("chain: %s", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = encodeMeta(chain) }); allocs > 1 {
		t.Errorf("%.0f allocations to encode a 3-step chain's meta, want 1", allocs)
	}
}
