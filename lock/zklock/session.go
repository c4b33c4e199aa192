package zklock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/txkit/txkit/lock"
)

// Session is a connection to a ZooKeeper ensemble that the lock recipes share. It survives the
// loss of a ZooKeeper session: when one expires — or is declared lost because the client has
// heard nothing from the ensemble for most of the session timeout, so the servers may already have
// expired it — the Session closes that connection, ends every lock and leadership that belonged to
// it, and opens a new ZooKeeper session for whatever comes next.
//
// Session events are read through go-zookeeper's event callback, never its event channel (which
// drops events when full). Session is safe for concurrent use by multiple goroutines.
type Session struct {
	servers []string
	o       sessionOptions
	log     *slog.Logger

	mu      sync.Mutex
	cur     *epoch
	closed  bool
	closeCh chan struct{}
	once    sync.Once
	wg      sync.WaitGroup // goroutines the Session owns (lease monitors, background deletes, conn closes)
	// unfair: the unfair recipe's node paths that a Mutex of this Session is taking or holds, each
	// with a channel closed when it lets go. ZooKeeper tells sessions apart, not Mutex values, so
	// Mutex values of one Session take turns here before they reach ZooKeeper.
	unfair map[string]chan struct{}

	stats sessionStats
}

// Stats counts what the Session's lock recipes did. Benchmarks and tests read it.
type Stats struct {
	Sessions    int64 // ZooKeeper sessions established
	Expirations int64 // ZooKeeper sessions lost (expired or declared lost)
	Writes      int64 // ZooKeeper writes (create, delete) issued by lock recipes
	Reads       int64 // ZooKeeper reads (children, get, exists) issued by lock recipes
	WatchEvents int64 // watch notifications that woke a waiting Lock
	Recovered   int64 // protected creates whose node was found again after a connection loss
	Orphans     int64 // nodes deleted because their create's outcome was unknown or abandoned
	Waiting     int64 // Lock calls waiting on a watch right now
}

type sessionStats struct {
	sessions, expirations, writes, reads, watchEvents, recovered, orphans, waiting atomic.Int64
}

// epoch is one ZooKeeper session: its connection, its id, and a channel closed when it ends.
type epoch struct {
	s        *Session
	conn     *zk.Conn
	lastRead atomic.Int64 // unix nanos of the last byte read from a server

	hasSession  chan struct{} // closed at the first StateHasSession
	established chan struct{} // closed once the session exists and its credentials are added
	authErr     error         // why adding the credentials failed; set before established closes
	done        chan struct{} // closed when this session is over
	ctx         context.Context
	cancel      context.CancelFunc

	mu          sync.Mutex
	id          int64
	err         error         // why it ended
	lostTimer   *time.Timer   // armed while disconnected
	reconnected chan struct{} // closed (and replaced) at every reconnection within the session
	disconnects int
}

// NewSession connects to the ZooKeeper servers (host:port) and blocks until a session is
// established or ctx ends; ctx scopes only the connection attempt. Close releases the Session.
// Without credentials ([WithDigestAuth]) it returns [ErrNoCredentials] unless
// [WithInsecureWorldACL] allows nodes that anyone may write.
func NewSession(ctx context.Context, servers []string, opts ...SessionOption) (*Session, error) {
	o := defaultSessionOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.acl = o.nodeACL()
	if len(servers) == 0 {
		return nil, fmt.Errorf("zklock: no zookeeper servers: %w", lock.ErrInvalidOption)
	}
	s := &Session{servers: append([]string(nil), servers...), o: o, log: o.log, closeCh: make(chan struct{})}
	s.mu.Lock()
	err := s.startEpochLocked()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, err := s.epoch(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("zklock: connect %v: %w", servers, err)
	}
	return s, nil
}

func (s *Session) startEpochLocked() error {
	e := &epoch{s: s, hasSession: make(chan struct{}), established: make(chan struct{}), done: make(chan struct{}), reconnected: make(chan struct{})}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	dial := func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := s.o.dialer(network, address, timeout)
		if err != nil {
			return nil, err
		}
		e.lastRead.Store(time.Now().UnixNano())
		return &readClock{Conn: c, last: &e.lastRead}, nil
	}
	// go-zookeeper may call onEvent before Connect returns; onEvent waits for e.mu, so it sees e.conn.
	e.mu.Lock()
	defer e.mu.Unlock()
	conn, _, err := zk.Connect(s.servers, s.o.timeout,
		zk.WithEventCallback(e.onEvent), zk.WithDialer(dial),
		zk.WithLogger(zkLogger{s.log}), zk.WithLogInfo(false))
	if err != nil {
		e.cancel()
		return fmt.Errorf("zklock: connect %v: %w", s.servers, err)
	}
	e.conn = conn
	s.cur = e
	if len(s.o.auth) > 0 {
		s.goOwned(e.addAuth)
	}
	return nil
}

// addAuth presents the Session's credentials once the ZooKeeper session exists, then lets the
// recipes use it: their requests are queued behind the credentials. go-zookeeper presents them
// again itself, before anything else, on every reconnection of this connection; a new ZooKeeper
// session gets a new connection and a new addAuth.
func (e *epoch) addAuth() {
	select {
	case <-e.hasSession:
	case <-e.done:
		return
	}
	defer close(e.established)
	for _, a := range e.s.o.auth {
		for {
			err := e.conn.AddAuth(a.scheme, a.cred)
			if err == nil {
				break
			}
			if e.isDone() {
				return
			}
			if !retryable(err) {
				e.mu.Lock()
				e.authErr = fmt.Errorf("zklock: zookeeper auth (scheme %q): %w", a.scheme, err)
				e.mu.Unlock()
				return
			}
			if pause(e.ctx, nil, retryPause) != nil { // e.ctx ends with the session
				return
			}
		}
	}
}

// readClock records when bytes last arrived from the server.
type readClock struct {
	net.Conn
	last *atomic.Int64
}

func (c *readClock) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// onEvent runs on go-zookeeper's goroutine: it must not block.
func (e *epoch) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateHasSession:
		e.mu.Lock()
		if e.lostTimer != nil {
			e.lostTimer.Stop()
			e.lostTimer = nil
		}
		first := e.id == 0
		id := e.conn.SessionID()
		if !first && id != e.id {
			// A new session behind our back: the old one is gone.
			e.mu.Unlock()
			e.lose(fmt.Errorf("%w: session %#x replaced by %#x", lock.ErrSessionExpired, e.id, id))
			return
		}
		e.id = id
		if !first {
			close(e.reconnected)
			e.reconnected = make(chan struct{})
		}
		e.mu.Unlock()
		if first {
			e.s.stats.sessions.Add(1)
			e.s.log.Debug("zookeeper session established", "session", fmt.Sprintf("%#x", id), "server", ev.Server)
			close(e.hasSession)
			if len(e.s.o.auth) == 0 {
				close(e.established)
			}
		} else {
			e.s.log.Info("zookeeper session reconnected", "session", fmt.Sprintf("%#x", id), "server", ev.Server)
		}
	case zk.StateDisconnected:
		e.mu.Lock()
		if e.id != 0 && e.lostTimer == nil && !e.isDone() {
			e.disconnects++
			// The servers expire the session a session timeout after they last heard from us; the
			// last bytes we read tell when that was, give or take a round trip. Declare it lost a
			// little before that, so that a deposed holder stops before the next one starts.
			deadline := time.Unix(0, e.lastRead.Load()).Add(e.s.o.timeout * 4 / 5)
			wait := time.Until(deadline)
			e.s.log.Warn("zookeeper disconnected", "session", fmt.Sprintf("%#x", e.id), "lost_in", wait.Round(time.Millisecond))
			e.lostTimer = time.AfterFunc(max(wait, 0), func() {
				e.lose(fmt.Errorf("%w: no answer from the ensemble for %v", lock.ErrSessionExpired, e.s.o.timeout*4/5))
			})
		}
		e.mu.Unlock()
	case zk.StateExpired:
		e.lose(fmt.Errorf("%w: expired by the ensemble", lock.ErrSessionExpired))
	}
}

func (e *epoch) isDone() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// lose ends the epoch: the Session starts a new one (unless closed), then the old one's done
// channel is closed and its connection closed in the background.
func (e *epoch) lose(why error) {
	s := e.s
	s.mu.Lock()
	e.mu.Lock()
	if e.isDone() {
		e.mu.Unlock()
		s.mu.Unlock()
		return
	}
	e.err = why
	if e.lostTimer != nil {
		e.lostTimer.Stop()
		e.lostTimer = nil
	}
	close(e.done)
	e.cancel()
	id := e.id
	e.mu.Unlock()
	if s.cur == e && !s.closed {
		s.stats.expirations.Add(1)
		s.log.Warn("zookeeper session lost", "session", fmt.Sprintf("%#x", id), "err", why)
		if err := s.startEpochLocked(); err != nil {
			s.log.Error("zookeeper reconnect failed", "err", err)
		}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		e.conn.Close()
	}()
}

// Err returns why the epoch ended, or nil while it lives.
func (e *epoch) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *epoch) authError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.authErr
}

func (e *epoch) sessionID() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.id
}

func (e *epoch) reconnectedCh() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reconnected
}

// epoch returns the current ZooKeeper session once it is established, waiting for it (and for
// the next one after a loss) until ctx ends or the Session is closed.
func (s *Session) epoch(ctx context.Context) (*epoch, error) {
	for {
		s.mu.Lock()
		e, closed := s.cur, s.closed
		s.mu.Unlock()
		if closed {
			return nil, lock.ErrClosed
		}
		select {
		case <-e.established:
			if err := e.authError(); err != nil {
				return nil, err
			}
			if !e.isDone() {
				return e, nil
			}
		case <-e.done:
		case <-s.closeCh:
			return nil, lock.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// This one ended; lose() has already put the next in place.
		if e.isDone() {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// ID returns the id of the current ZooKeeper session (0 while none is established).
func (s *Session) ID() int64 {
	s.mu.Lock()
	e := s.cur
	s.mu.Unlock()
	return e.sessionID()
}

// Done returns a channel closed when the current ZooKeeper session ends (expiry, declared loss,
// or Close). After such an end the Session opens a new ZooKeeper session: call Done again to
// watch that one.
func (s *Session) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.done
}

// Context returns a context cancelled when the current ZooKeeper session ends (see [Session.Done]).
func (s *Session) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.ctx
}

// Conn returns the go-zookeeper connection of the current ZooKeeper session, for reads the lock
// recipes do not cover. Do not close it; it is replaced after a session loss.
func (s *Session) Conn() *zk.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.conn
}

// LockEpoch returns the epoch of the fencing tokens that a lock on lockPath hands out now: the
// path's creation zxid (see [lock.Token]). It returns an error wrapping zk.ErrNoNode when the path does
// not exist (the first Lock creates it). It blocks for one ZooKeeper round trip, bounded by ctx,
// and needs no permission on the path.
func (s *Session) LockEpoch(ctx context.Context, lockPath string) (int64, error) {
	if err := validPath(lockPath); err != nil {
		return 0, err
	}
	ep, err := s.epoch(ctx)
	if err != nil {
		return 0, err
	}
	s.stats.reads.Add(1)
	r, err := ep.exists(ctx, lockPath, false)
	if err == nil && !r.val {
		err = zk.ErrNoNode
	}
	if err != nil {
		return 0, fmt.Errorf("zklock: epoch of %s: %w", lockPath, err)
	}
	return r.stat.Czxid, nil
}

// Timeout returns the session timeout the Session asks for.
func (s *Session) Timeout() time.Duration { return s.o.timeout }

// Stats returns counts of what the Session's recipes did so far.
func (s *Session) Stats() Stats {
	return Stats{
		Sessions:    s.stats.sessions.Load(),
		Expirations: s.stats.expirations.Load(),
		Writes:      s.stats.writes.Load(),
		Reads:       s.stats.reads.Load(),
		WatchEvents: s.stats.watchEvents.Load(),
		Recovered:   s.stats.recovered.Load(),
		Orphans:     s.stats.orphans.Load(),
		Waiting:     s.stats.waiting.Load(),
	}
}

// Close ends the ZooKeeper session (its ephemeral nodes, and so every lock and leadership held
// through it, go at once), stops the Session's goroutines and waits for them. Calling it again
// does nothing.
func (s *Session) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		e := s.cur
		close(s.closeCh)
		s.mu.Unlock()
		e.lose(lock.ErrClosed)
		s.wg.Wait()
	})
	return nil
}

// go runs f in a goroutine that Close waits for.
func (s *Session) goOwned(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// call runs op on the epoch's connection and returns its result, or returns early when ctx ends
// or the epoch is lost. go-zookeeper calls take no context and wait through a disconnection; op
// keeps running in the background then, until the connection answers or is closed, and its
// result is dropped. op must not write to variables the caller reads.
func call[T any](ctx context.Context, e *epoch, op func(*zk.Conn) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := op(e.conn)
		ch <- result{v, err}
	}()
	var zero T
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-e.done:
		return zero, e.Err()
	}
}

// do is call for operations without a result.
func (e *epoch) do(ctx context.Context, op func(*zk.Conn) error) error {
	_, err := call(ctx, e, func(c *zk.Conn) (struct{}, error) { return struct{}{}, op(c) })
	return err
}

// readResult is what a read returns: the value (children's names, whether the node exists, its
// data), the node's stat, and with a watch the channel that fires at the next change.
type readResult[T any] struct {
	val   T
	stat  *zk.Stat
	watch <-chan zk.Event
}

// read runs the watching form of a read (watched) when watch is set, the plain one otherwise.
func read[T any](ctx context.Context, e *epoch, p string, watch bool,
	plain func(*zk.Conn, string) (T, *zk.Stat, error),
	watched func(*zk.Conn, string) (T, *zk.Stat, <-chan zk.Event, error),
) (readResult[T], error) {
	return call(ctx, e, func(c *zk.Conn) (r readResult[T], err error) {
		if watch {
			r.val, r.stat, r.watch, err = watched(c, p)
		} else {
			r.val, r.stat, err = plain(c, p)
		}
		return r, err
	})
}

// children lists the children of p; val is their names.
func (e *epoch) children(ctx context.Context, p string, watch bool) (readResult[[]string], error) {
	return read(ctx, e, p, watch, (*zk.Conn).Children, (*zk.Conn).ChildrenW)
}

// exists reads the stat of p; val tells whether p exists.
func (e *epoch) exists(ctx context.Context, p string, watch bool) (readResult[bool], error) {
	return read(ctx, e, p, watch, (*zk.Conn).Exists, (*zk.Conn).ExistsW)
}

// get reads the data and stat of p; val is the data.
func (e *epoch) get(ctx context.Context, p string, watch bool) (readResult[[]byte], error) {
	return read(ctx, e, p, watch, (*zk.Conn).Get, (*zk.Conn).GetW)
}

func (e *epoch) create(ctx context.Context, p string, data []byte, flags int32) (string, error) {
	return call(ctx, e, func(c *zk.Conn) (string, error) {
		return c.Create(p, data, flags, e.s.o.acl)
	})
}

type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zk: " + fmt.Sprintf(format, args...))
}

// claimUnfair waits until no other Mutex of the Session is taking or holding the unfair node,
// then claims it; the returned func lets go. With wait false it returns ErrLocked at once.
func (s *Session) claimUnfair(ctx context.Context, node string, wait bool) (func(), error) {
	for {
		s.mu.Lock()
		held, busy := s.unfair[node]
		if !busy {
			if s.unfair == nil {
				s.unfair = map[string]chan struct{}{}
			}
			ch := make(chan struct{})
			s.unfair[node] = ch
			s.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					s.mu.Lock()
					delete(s.unfair, node)
					s.mu.Unlock()
					close(ch)
				})
			}, nil
		}
		s.mu.Unlock()
		if !wait {
			return nil, fmt.Errorf("zklock: %s held by another Mutex of this session: %w", node, lock.ErrLocked)
		}
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
