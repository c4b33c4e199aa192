package core

import (
	"encoding/hex"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// The log's hottest statements (a record with its branches, a decision, a finish) pass their
// arguments as these: each holds a pointer into the write, one machine word, which an interface
// holds without allocating — where a string, a float64 or a byte slice is copied to the heap when
// boxed (two allocations per branch, six per record before). pgx encodes them through pgtype's
// valuer interfaces, with the same bytes on the wire: in binary (Float64Valuer, Int64Valuer,
// BytesValuer) where the statement's description gives the parameter's type, as text (TextValuer)
// where it does not — a pool in "exec" or "simple_protocol" mode (TestIntegrationLogExecModes).
type (
	textArg  struct{ p *string }
	bytesArg struct{ p *[]byte } // a nil slice is NULL, as a nil []byte
	floatArg struct{ p *float64 }
	int4Arg  struct{ p *int32 }
)

func (a textArg) TextValue() (pgtype.Text, error) { return pgtype.Text{String: *a.p, Valid: true}, nil }

func (a bytesArg) BytesValue() ([]byte, error) { return *a.p, nil }

// TextValue is bytea's text form (hex).
func (a bytesArg) TextValue() (pgtype.Text, error) {
	if *a.p == nil {
		return pgtype.Text{}, nil
	}
	return pgtype.Text{String: `\x` + hex.EncodeToString(*a.p), Valid: true}, nil
}

func (a floatArg) Float64Value() (pgtype.Float8, error) {
	return pgtype.Float8{Float64: *a.p, Valid: true}, nil
}

func (a floatArg) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: strconv.FormatFloat(*a.p, 'f', -1, 64), Valid: true}, nil
}

func (a int4Arg) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*a.p), Valid: true}, nil
}

func (a int4Arg) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: strconv.FormatInt(int64(*a.p), 10), Valid: true}, nil
}
