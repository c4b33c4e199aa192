package core

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/txkit/txkit/internal/obs"
)

// The span attributes of the coordinators.
const (
	AttrGID    = "txkit.gid"    // the global transaction's id
	AttrBranch = "txkit.branch" // the branch's name
	AttrOp     = "txkit.op"     // the participant op (try, confirm, prepare, ...)
)

// tracerName is the instrumentation scope of a coordinator package (tcc, saga, twopc, threepc), or
// of this one.
const tracerName = "github.com/txkit/txkit/"

// tracer returns the tracer of package pkg ("" for internal/core) from tp (nil: the global provider).
func tracer(tp trace.TracerProvider, pkg ...string) trace.Tracer {
	name := tracerName + "internal/core"
	if len(pkg) > 0 {
		name = tracerName + pkg[0]
	}
	return obs.TracerProvider(tp).Tracer(name)
}
