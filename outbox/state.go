package outbox

import (
	"fmt"
	"strconv"
)

// Status is the state of a row in the outbox. A message is [StatusPending] from [Outbox.Enqueue]
// until the [Relay] has published it — then its row is deleted, so "sent" is not a status — or
// until it has failed [WithRetry]'s attempts, when it becomes [StatusDead]. [Outbox.Requeue]
// makes a dead message pending again. The table's status column stores [Status.String].
type Status uint8

const (
	StatusPending Status = iota + 1 // waiting to be published (again, after a failure)
	StatusDead                      // failed WithRetry's attempts; waits for an operator
)

// String returns the name stored in the table's status column.
func (s Status) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusDead:
		return "dead"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// ParseStatus reads the name [Status.String] writes.
func ParseStatus(s string) (Status, error) {
	switch s {
	case "pending":
		return StatusPending, nil
	case "dead":
		return StatusDead, nil
	}
	return 0, fmt.Errorf("outbox: unknown status %q", s)
}

// transitions lists, for each status, the statuses a row may move to, and who moves it. Every
// statement that changes a status follows this table (state_test.go checks the SQL against it).
// A sent message leaves the table instead of changing status.
var transitions = map[Status][]Status{
	StatusPending: {StatusPending, StatusDead}, // relay: publish failed (retry later, or give up)
	StatusDead:    {StatusPending},             // operator: Requeue
}

// canBecome reports whether a row in status s may move to t.
func (s Status) canBecome(t Status) bool {
	for _, n := range transitions[s] {
		if n == t {
			return true
		}
	}
	return false
}
