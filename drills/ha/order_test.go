package main

import "testing"

// TestOrderCount: a redelivered message counts once as applied twice (not as a violation), and a
// message applied after a later one of its key is a violation; other keys' sequences are their own.
func TestOrderCount(t *testing.T) {
	rows := []orderRow{{"a", 0}, {"b", 0}, {"a", 1}, {"a", 1}, {"b", 2}, {"b", 1}, {"a", 2}}
	once, twice, violations, first := orderCount(rows)
	if once != 6 || twice != 1 || violations != 1 || first != "b seq 1 applied after seq 2" {
		t.Fatalf("orderCount = %d once, %d twice, %d violations, first %q; want 6, 1, 1, \"b seq 1 applied after seq 2\"", once, twice, violations, first)
	}
}
