package prepared

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxID is the longest transaction id PREPARE TRANSACTION accepts (GIDSIZE 200, with its
// terminating NUL), in bytes.
const MaxID = 199

// CheckName validates a gid, a branch or database name or a namespace at the API boundary: they
// end up in the names of prepared transactions, which PostgreSQL takes only as string literals.
// Beyond what PostgreSQL accepts at all (valid UTF-8, no NUL, [MaxID] bytes), it refuses the
// backslash (an escape character in some settings) and every control character, so a name
// cannot mean anything but itself in a statement, a log line or a terminal. what names s in the
// error, which callers wrap with their sentinel.
func CheckName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case len(s) > MaxID:
		return fmt.Errorf("%s longer than %d bytes", what, MaxID)
	case strings.IndexByte(s, '\\') >= 0:
		return fmt.Errorf("%s %q contains a backslash", what, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("%s %q contains a control character", what, s)
	}
	return nil
}

// Quote makes s a SQL string literal (PREPARE TRANSACTION and its kin take no parameters) that
// means s whatever standard_conforming_strings is: an escape string, E'...', in which both the
// backslash and the quote are doubled. (A plain '...' with only the quote doubled is read
// differently when standard_conforming_strings is off: a backslash then escapes the quote that
// follows it, and the rest of s runs as SQL.) s holds no NUL: CheckName refuses it, and so does
// PostgreSQL in any text.
//
// It runs on every PREPARE TRANSACTION and COMMIT PREPARED, so it doubles the two bytes in one pass
// rather than building a strings.Replacer per call (4 % of a 2PC benchmark's processor time).
func Quote(s string) string { return QuoteAfter("", s) }

// QuoteAfter returns sql followed by Quote(s), made in one allocation: a statement ending in a
// prepared transaction's id ("COMMIT PREPARED " + Quote(id)).
func QuoteAfter(sql, s string) string {
	var b strings.Builder
	b.Grow(len(sql) + len(s) + 4)
	b.WriteString(sql)
	writeQuoted(&b, s)
	return b.String()
}

// writeQuoted writes Quote(s) to b.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteString("E'")
	for i := range len(s) {
		if c := s[i]; c == '\\' || c == '\'' {
			b.WriteByte(c)
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('\'')
}

// Namespace names one coordinator's prepared transactions:
// "txkit:<schema or ->.<prefix>:<length of gid>:<gid>:<branch>". Coordinators whose logs differ
// must differ in schema or table prefix, so that a scan finds only its own. The zero Namespace is
// not usable; make one with [NewNamespace]. A Namespace is a value, safe for concurrent use.
type Namespace struct {
	prefix string // "txkit:<schema or ->.<prefix>:"
}

// NewNamespace returns the namespace of a coordinator whose log is in schema (empty: the
// search_path's, written "-") with table prefix prefix. It returns an error when
// "<schema or ->.<prefix>" fails [CheckName] (a backslash, a control character, too long).
func NewNamespace(schema, prefix string) (Namespace, error) {
	ns := schema
	if ns == "" {
		ns = "-"
	}
	ns += "." + prefix
	if err := CheckName("namespace (schema.prefix)", ns); err != nil {
		return Namespace{}, err
	}
	return Namespace{prefix: "txkit:" + ns + ":"}, nil
}

// ID names gid's branch's prepared transaction. It does not check the length: compare it with
// [MaxID] before preparing.
func (n Namespace) ID(gid, branch string) string {
	return n.prefix + strconv.Itoa(len(gid)) + ":" + gid + ":" + branch
}

// Prefix is what every ID of n begins with, "txkit:<schema or ->.<prefix>:".
func (n Namespace) Prefix() string { return n.prefix }

// Parse returns the gid and branch of an id made by n.ID, and false for anyone else's id
// (another namespace's, or one whose gid or branch [CheckName] refuses).
func (n Namespace) Parse(id string) (gid, branch string, ok bool) {
	if n.prefix == "" {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(id, n.prefix)
	if !ok {
		return "", "", false
	}
	l, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", "", false
	}
	size, err := strconv.Atoi(l)
	if err != nil || size <= 0 || len(rest) < size+2 || rest[size] != ':' {
		return "", "", false
	}
	gid, branch = rest[:size], rest[size+1:]
	if CheckName("gid", gid) != nil || CheckName("branch", branch) != nil {
		return "", "", false // not a name a coordinator makes: someone else's
	}
	return gid, branch, true
}
