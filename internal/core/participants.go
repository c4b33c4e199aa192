package core

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/txkit/txkit/participant"
)

// Participants is a coordinator's registry of participants: in-process and gRPC ones registered
// by name (a branch stores the name, so every coordinator that may recover it registers the same
// name), HTTP ones found by the URL a branch stores. A gRPC participant (package
// participant/grpccall) is told apart by its Transport method, so that this package does not
// link gRPC. It turns a participant into the [Target] a branch
// records and a recorded Target back into a participant.
//
// Participants is safe for concurrent use by multiple goroutines.
type Participants struct {
	client *http.Client
	mu     sync.RWMutex
	byName map[string]participant.Participant
}

// NewParticipants returns an empty registry whose HTTP participants are called with client (nil:
// the default of a participant.HTTP without Client).
func NewParticipants(client *http.Client) *Participants {
	return &Participants{client: client, byName: map[string]participant.Participant{}}
}

// Register makes p the in-process participant called name and returns the handle to put in a
// branch. Registering a name twice, an empty name or a nil participant returns an error wrapping
// [ErrInvalidOption].
func (r *Participants) Register(name string, p participant.Participant) (participant.Participant, error) {
	if name == "" || p == nil {
		return nil, fmt.Errorf("register %q: empty name or nil participant: %w", name, ErrInvalidOption)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byName[name]; ok {
		return nil, fmt.Errorf("register %q: already registered: %w", name, ErrInvalidOption)
	}
	r.byName[name] = p
	return named{name: name, p: p}, nil
}

// named is a registered in-process participant: the branch stores its name.
type named struct {
	name string
	p    participant.Participant
}

func (n named) Do(ctx context.Context, req participant.Request) error { return n.p.Do(ctx, req) }

// Target says where the recovery finds p: the URL of a participant.HTTP, or the name of a
// participant returned by Register (of kind [TargetGRPC] for a gRPC participant). Any other participant returns an error wrapping
// [ErrInvalidBranch], and so does a participant.HTTP whose Client is neither nil nor the
// coordinator's: the recovery (and tcc's confirms) call the URL with the coordinator's client, so
// a client of the branch's own would sign (or reach) only some of the branch's calls.
func (r *Participants) Target(p participant.Participant) (Target, error) {
	if hp, ok := httpOf(p); ok && hp.URL != "" {
		if hp.Client != nil && hp.Client != r.client {
			return Target{}, fmt.Errorf("participant.HTTP %s: its Client is not the coordinator's (coordinator.WithHTTPClient), "+
				"which calls the branch's other ops: leave it nil to use the coordinator's: %w", hp.URL, ErrInvalidBranch)
		}
		if err := CheckHeader(hp.Header); err != nil {
			return Target{}, fmt.Errorf("participant.HTTP %s: %w: %w", hp.URL, err, ErrInvalidBranch)
		}
		return Target{Kind: TargetHTTP, Ref: hp.URL, Header: hp.Header.Clone()}, nil
	}
	switch p := p.(type) {
	case named:
		if transportOf(p.p) == transportGRPC {
			return Target{Kind: TargetGRPC, Ref: p.name}, nil
		}
		return Target{Kind: TargetInProc, Ref: p.name}, nil
	}
	return Target{}, fmt.Errorf("participant %T is neither a participant.HTTP with a URL nor registered with the coordinator: %w", p, ErrInvalidBranch)
}

// httpOf returns p as a participant.HTTP when it is one (or a non-nil pointer to one).
func httpOf(p participant.Participant) (participant.HTTP, bool) {
	switch p := p.(type) {
	case participant.HTTP:
		return p, true
	case *participant.HTTP:
		if p != nil {
			return *p, true
		}
	}
	return participant.HTTP{}, false
}

// bind returns p with the coordinator's client when p is a participant.HTTP without one: the
// client is set once, on the coordinator, for every call of every branch.
func (r *Participants) bind(p participant.Participant) participant.Participant {
	if hp, ok := httpOf(p); ok && hp.Client == nil {
		hp.Client = r.client
		return hp
	}
	return p
}

// Resolve returns the participant a branch's Target names. An in-process name that is not
// registered with this coordinator is an error (retried: another coordinator may lead later).
func (r *Participants) Resolve(t Target) (participant.Participant, error) {
	switch t.Kind {
	case TargetHTTP:
		return participant.HTTP{URL: t.Ref, Client: r.client, Header: t.Header}, nil
	case TargetInProc, TargetGRPC:
		r.mu.RLock()
		p := r.byName[t.Ref]
		r.mu.RUnlock()
		if p == nil {
			return nil, fmt.Errorf("%s participant %q is not registered with this coordinator", t.Kind, t.Ref)
		}
		return p, nil
	}
	return nil, fmt.Errorf("unknown target %s", t.Kind)
}

// The transports of participants, the values of the branch-call metrics' transport label.
const (
	transportHTTP   = "http"
	transportInProc = "inproc"
	transportGRPC   = "grpc"
)

// transportOf returns how p is reached: [transportHTTP] for a participant.HTTP, the value of a
// Transport() string method when p has one (a gRPC participant of package participant/grpccall
// says [transportGRPC]), [transportInProc] otherwise. A registered handle reports the transport
// of the participant it names.
func transportOf(p participant.Participant) string {
	switch p := p.(type) {
	case participant.HTTP, *participant.HTTP:
		return transportHTTP
	case named:
		return transportOf(p.p)
	case interface{ Transport() string }:
		if t := p.Transport(); t == transportGRPC {
			return t
		}
	}
	return transportInProc
}
