package lock

import (
	"fmt"
	"strconv"
	"strings"
)

// Token is a fencing token: it increases strictly from one holder of a lock path to the next, so
// a store can refuse writes from a deposed holder (see package fence).
//
// A token is the pair (Epoch, Seq): Epoch is the czxid of the lock path's parent node — the zxid
// of the transaction that created it, which ZooKeeper makes monotonic across the whole ensemble —
// and Seq is the sequence number of the holder's node under it. The bare sequence number is not
// enough: it restarts at 0 when the parent node is deleted and created again, but the new parent's
// czxid is larger than the old one's. Both come from the children listing that the lock recipe
// does anyway, so the token costs no extra round trip.
//
// Tokens compare lexicographically: first Epoch, then Seq. The zero Token is lower than every
// token a lock hands out.
//
// The epoch is the lock path's ZooKeeper creation id, so it belongs to the ensemble. An ensemble
// rebuilt from empty data (a new cluster, lost data directories) numbers its transactions from
// zero again: every token it hands out is below the ones package fence recorded from the old ensemble,
// and every holder is fenced until the fence's entries are reset (fence.Fence.Reset; operators run
// `txkit fence reset -resource R -path P`). Deleting and re-creating a lock path on the same
// ensemble is harmless: the new path's epoch is higher.
type Token struct {
	Epoch int64 // czxid of the lock path node
	Seq   int64 // sequence number of the holder's node
}

// Compare returns -1, 0 or +1 as t is lower than, equal to or higher than u.
func (t Token) Compare(u Token) int {
	switch {
	case t.Epoch < u.Epoch:
		return -1
	case t.Epoch > u.Epoch:
		return 1
	case t.Seq < u.Seq:
		return -1
	case t.Seq > u.Seq:
		return 1
	}
	return 0
}

// Less reports whether t is lower than u.
func (t Token) Less(u Token) bool { return t.Compare(u) < 0 }

// IsZero reports whether t is the zero Token (no lock handed it out).
func (t Token) IsZero() bool { return t == Token{} }

// String formats t as "<epoch>.<seq>", the form [ParseToken] reads.
func (t Token) String() string {
	return strconv.FormatInt(t.Epoch, 10) + "." + strconv.FormatInt(t.Seq, 10)
}

// ParseToken reads a Token in the form [Token.String] writes.
func ParseToken(s string) (Token, error) {
	e, q, ok := strings.Cut(s, ".")
	if !ok {
		return Token{}, fmt.Errorf("lock: token %q: want <epoch>.<seq>: %w", s, ErrInvalidOption)
	}
	epoch, err := strconv.ParseInt(e, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("lock: token %q: epoch: %w", s, err)
	}
	seq, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("lock: token %q: seq: %w", s, err)
	}
	return Token{Epoch: epoch, Seq: seq}, nil
}
