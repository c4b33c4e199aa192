package coretest

import (
	"context"
	"strings"
	"sync"

	"github.com/txkit/txkit/participant"
)

// Party is an in-process participant that records, in order, the ops it is asked to do
// ("op/branch") and answers each with Answer (nil: success). Safe for concurrent use; set
// Answer before the first call or through SetAnswer.
type Party struct {
	Answer func(req participant.Request) error

	mu    sync.Mutex
	calls []string
}

// NewParty returns a Party answering with answer.
func NewParty(answer func(participant.Request) error) *Party { return &Party{Answer: answer} }

// Do records req and answers it.
func (p *Party) Do(_ context.Context, req participant.Request) error {
	p.mu.Lock()
	p.calls = append(p.calls, req.Op.String()+"/"+req.Branch)
	answer := p.Answer
	p.mu.Unlock()
	if answer != nil {
		return answer(req)
	}
	return nil
}

// Log returns the calls so far, in order.
func (p *Party) Log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// Only returns the branches of the calls of op so far, in order.
func (p *Party) Only(op participant.Op) []string {
	var out []string
	for _, c := range p.Log() {
		if b, ok := strings.CutPrefix(c, op.String()+"/"); ok {
			out = append(out, b)
		}
	}
	return out
}

// Count returns how many times call ("op/branch") was made.
func (p *Party) Count(call string) int {
	n := 0
	for _, c := range p.Log() {
		if c == call {
			n++
		}
	}
	return n
}

// SetAnswer replaces the answer of the calls to come.
func (p *Party) SetAnswer(f func(participant.Request) error) {
	p.mu.Lock()
	p.Answer = f
	p.mu.Unlock()
}
