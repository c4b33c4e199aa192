package outbox

import (
	"errors"
	"maps"
	"slices"
	"strconv"
)

// maxOutageRows bounds the rows an [outage] remembers; those that failed beyond it wait out their
// backoff.
const maxOutageRows = 100_000

// outage remembers the rows whose publish failed while no publish succeeded, in one leadership
// term. When they are of at least two keys (a message of its own that keeps failing is not an
// outage: it keeps its backoff), the broker looked down, and the first acknowledged publish after
// them makes them due at once: they do not wait out a backoff that kept doubling while the
// broker was away. It is used by the drain loop's goroutine only.
type outage struct {
	ids  []int64
	keys map[string]struct{}
}

func (o *outage) add(id int64, key string) {
	if len(o.ids) >= maxOutageRows {
		return
	}
	if o.keys == nil {
		o.keys = map[string]struct{}{}
	}
	if key == "" {
		key = "\x00" + strconv.FormatInt(id, 10) // a message without a key is a group of its own
	}
	o.ids = append(o.ids, id)
	o.keys[key] = struct{}{}
}

// over returns the rows to make due now that a publish succeeded: those of an outage, or none.
func (o *outage) over() []int64 {
	if len(o.keys) < 2 {
		return nil
	}
	return o.ids
}

// rescue returns the rows to make due when a batch's results errs (in the order the publishes
// ended) are written: none unless one was acknowledged, else those of the outage that the first
// acknowledgement ends, the batch's failures before it included (the recorder writes together
// the results of publishes that ended together, so an outage's end may share its last failures'
// batch). o is left as it is: recorded takes the batch in once it is written.
func (o *outage) rescue(batch []row, errs []error) []int64 {
	first := slices.IndexFunc(errs, func(e error) bool { return e == nil })
	if first < 0 {
		return nil
	}
	if first == 0 {
		return o.over()
	}
	before := outage{ids: slices.Clone(o.ids), keys: maps.Clone(o.keys)}
	before.failed(batch[:first], errs[:first])
	return before.over()
}

func (o *outage) reset() { o.ids, o.keys = o.ids[:0], nil }

// recorded takes in a batch's publish results errs (in the order the publishes ended) once they
// are written: an acknowledged publish ends the outage (the same transaction made its rows due),
// and the failures after the last one start the next.
func (o *outage) recorded(batch []row, errs []error) {
	for i := len(errs) - 1; i >= 0; i-- {
		if errs[i] == nil {
			o.reset()
			batch, errs = batch[i+1:], errs[i+1:]
			break
		}
	}
	o.failed(batch, errs)
}

// failed adds the rows of batch that failed to the outage, but those the broker can never carry
// (ErrInvalidMessage).
func (o *outage) failed(batch []row, errs []error) {
	for i, x := range batch {
		if e := errs[i]; e != nil && !errors.Is(e, ErrInvalidMessage) {
			o.add(x.id, x.msg.Key)
		}
	}
}
