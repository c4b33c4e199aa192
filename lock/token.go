package lock

import (
	"fmt"
	"strconv"
	"strings"
)

// Token is a fencing token: it increases strictly from one holder of a lock to the next, so a
// store can refuse writes from a deposed holder (see package fence). Each backend mints its
// tokens in its own way, and says how in its package doc (lock/zklock: the lock path's creation
// zxid and the holder's node sequence; lock/pglock and lock/redislock: a counter in Seq, Epoch 0).
// Tokens of different backends are not comparable, and a server rebuilt from empty data starts
// low again: reset the fence's entries then (`txkit fence reset`).
//
// Tokens compare lexicographically: first Epoch, then Seq. The zero Token is lower than every
// token a lock hands out.
type Token struct {
	Epoch int64 // the generation of the lock's counter (0 where the backend has one counter)
	Seq   int64 // the holder's number within the epoch
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
