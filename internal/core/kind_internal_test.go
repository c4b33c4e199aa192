package core

import "testing"

// Every kind's begin span is named "<kind> begin", from the table made once (beginSpans).
func TestKindBeginSpan(t *testing.T) {
	for k, name := range kindNames {
		if got, want := k.beginSpan(), name+" begin"; got != want {
			t.Errorf("%s: begin span %q, want %q", name, got, want)
		}
		if _, ok := beginSpans[k]; !ok {
			t.Errorf("%s: no begin span in the table", name)
		}
	}
}
