package core

import (
	"errors"
	"fmt"
	"testing"
)

// TestSetBranches: a record of three branches fills its arrays in 4 allocations (issue 33: 6
// before, with a set of names and an array per string column); a repeated name is refused below
// and above the size where the set takes over from the search.
func TestSetBranches(t *testing.T) {
	branches := func(n int) []Branch {
		bs := make([]Branch, n)
		for i := range bs {
			bs[i] = Branch{Name: fmt.Sprint("b", i), Seq: i, Target: Target{Kind: TargetHTTP, Ref: "http://127.0.0.1:1/p"}}
		}
		return bs
	}
	three := branches(3)
	var w write
	allocs := testing.AllocsPerRun(100, func() {
		if err := w.setBranches("g", three); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Errorf("%.0f allocations to set 3 branches, want at most 4", allocs)
	}
	if w.names[2] != "b2" || w.refs[2] != three[2].Target.Ref || w.targetKinds[2] != TargetHTTP.String() || w.seqs[2] != 2 {
		t.Errorf("arrays %v %v %v %v", w.names, w.refs, w.targetKinds, w.seqs)
	}
	for _, n := range []int{3, 20} {
		bs := branches(n)
		bs[n-1].Name = bs[1].Name
		if err := (&write{}).setBranches("g", bs); !errors.Is(err, ErrInvalidBranch) {
			t.Errorf("%d branches, one name twice: %v, want ErrInvalidBranch", n, err)
		}
		if err := (&write{}).setBranches("g", branches(n)); err != nil {
			t.Errorf("%d branches: %v", n, err)
		}
	}
}
