package core

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/txkit/txkit/internal/pgutil"
)

// MaxGIDLen is the longest gid, in bytes, a transaction may be begun with: the longest id of a
// PostgreSQL prepared transaction (two-phase commit names its prepared transactions by gid).
const MaxGIDLen = 199

// CheckGID returns nil when gid may name a new transaction, or an error saying why not: empty,
// longer than [MaxGIDLen] bytes, not valid UTF-8, or holding a control character (NUL among them),
// a format character (bidirectional overrides such as U+202E, zero-width characters) or a line
// or paragraph separator, which PostgreSQL refuses or an operator's console would show with their
// effect. It does not block.
func CheckGID(gid string) error {
	if err := pgutil.CheckText(gid, MaxGIDLen); err != nil {
		return err
	}
	if i := strings.IndexFunc(gid, unprintable); i >= 0 {
		return fmt.Errorf("contains %U at byte %d", []rune(gid[i:])[0], i)
	}
	return nil
}

func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
