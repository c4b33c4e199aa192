package core

import (
	"context"
	"fmt"
	"slices"
)

// AddBranches records branches bs of gid, all of them or none, while gid is in status want, in
// one write: a TCC Try of several branches. Its errors are [Log.AddBranch]'s; a name already
// recorded, or two of bs with one name, record none. One branch is [Log.AddBranch].
func (l *Log) AddBranches(ctx context.Context, gid string, want Status, bs []Branch) error {
	if len(bs) == 1 {
		return l.AddBranch(ctx, gid, want, bs[0])
	}
	w := &write{kind: writeAddAll, gid: gid, from: want.String()}
	if err := w.setBranches(gid, bs); err != nil {
		return fmt.Errorf("core: branches of %s: %w", gid, err)
	}
	added, err := l.write(ctx, w)
	if err != nil {
		return fmt.Errorf("core: branches of %s: %w", gid, err)
	}
	if added {
		return nil
	}
	cur, err := l.status(ctx, gid)
	if err != nil {
		return fmt.Errorf("core: branches of %s: %w", gid, err)
	}
	if cur != want {
		return fmt.Errorf("core: branches of %s: transaction is %s, not %s: %w", gid, cur, want, ErrInvalidState)
	}
	return fmt.Errorf("core: branches %v of %s: one is already recorded: %w", w.names, gid, ErrInvalidBranch)
}

// setBranches sets w's branch arrays (create_with_branches, add_branches) to bs, refusing an
// empty name, a bad target or a name used twice with an error wrapping [ErrInvalidBranch].
func (w *write) setBranches(gid string, bs []Branch) error {
	n := len(bs)
	if n == 0 {
		return nil
	}
	// The three string arrays share one allocation (capped: an append copies); names are checked
	// for repeats by search below 9 branches, by a set above.
	strs := make([]string, 3*n)
	w.names, w.targetKinds, w.refs = strs[:n:n], strs[n:2*n:2*n], strs[2*n:]
	w.seqs, w.payloads, w.callOpts = make([]int32, n), make([][]byte, n), make([]*string, n)
	var seen map[string]bool
	if n > 8 {
		seen = make(map[string]bool, n)
	}
	for i, b := range bs {
		switch {
		case b.Name == "":
			return fmt.Errorf("branch %d: empty name: %w", i, ErrInvalidBranch)
		case b.Target.Ref == "" || !b.Target.Kind.valid():
			return fmt.Errorf("branch %s: target %s %q: %w", b.Name, b.Target.Kind, b.Target.Ref, ErrInvalidBranch)
		case seen != nil && seen[b.Name] || seen == nil && slices.Contains(w.names[:i], b.Name):
			return fmt.Errorf("branch %s: name used twice: %w", b.Name, ErrInvalidBranch)
		}
		if seen != nil {
			seen[b.Name] = true
		}
		w.names[i], w.targetKinds[i], w.refs[i], w.seqs[i], w.payloads[i] = b.Name, b.Target.Kind.String(), b.Target.Ref, int32(b.Seq), b.Payload
		w.callOpts[i] = encodeCallOptions(b.Target)
	}
	return nil
}
