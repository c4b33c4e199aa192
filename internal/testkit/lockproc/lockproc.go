// Package lockproc holds what lock's integration tests share with each other and with tests of
// packages built on lock: a Java contender built on Apache Curator's InterProcessMutex
// ([Curator]), and a marker file that tells when two holders of one lock overlap ([Marker]).
//
// A test that checks mutual exclusion across processes gives every contender the same marker
// path; each one enters the marker right after taking the lock and leaves it right before the
// release:
//
//	marker := lockproc.Marker(filepath.Join(t.TempDir(), "held"))
//	lease, err := m.Lock(ctx)
//	...
//	if err := marker.Enter(); err != nil { // errors.Is(err, lockproc.ErrOverlap): exclusion is broken
//		...
//	}
//	// work under lease.Context()
//	err = marker.Leave()
//	err = m.Unlock(ctx)
//
// Files of the package live under $TXKIT_HOME (default <repo>/.txkit, the directory the
// deploy/local scripts use).
package lockproc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrOverlap means that two contenders held the same lock at once: one found the [Marker] of the
// other, or found its own gone.
var ErrOverlap = errors.New("lockproc: two holders at once: mutual exclusion is broken")

// Marker is the path of a file that exists exactly while some contender holds the lock. Its methods
// touch only the file system and are safe for concurrent use (the file system arbitrates).
type Marker string

// Enter creates the marker file, failing when it already exists: then another contender holds the
// lock too, and the error wraps [ErrOverlap]. Other errors are the file system's.
func (m Marker) Enter() error {
	f, err := os.OpenFile(string(m), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("lockproc: enter marker %s: it exists: %w", m, ErrOverlap)
	}
	if err != nil {
		return fmt.Errorf("lockproc: enter marker %s: %w", m, err)
	}
	return f.Close()
}

// Leave removes the marker file. A marker that is already gone means that another contender
// entered and left it meanwhile; the error then wraps [ErrOverlap].
func (m Marker) Leave() error {
	err := os.Remove(string(m))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lockproc: leave marker %s: it is gone: %w", m, ErrOverlap)
	}
	if err != nil {
		return fmt.Errorf("lockproc: leave marker %s: %w", m, err)
	}
	return nil
}

// EnvHome names the variable that sets where txkit keeps local state (default <repo>/.txkit).
const EnvHome = "TXKIT_HOME"

// Home returns $TXKIT_HOME, or <repo>/.txkit when it is unset.
func Home() (string, error) {
	if h := os.Getenv(EnvHome); h != "" {
		return filepath.Abs(h)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".txkit"), nil
}

// RepoRoot returns the nearest directory at or above the working directory that holds a go.mod
// file: the root of the txkit module when run by `go test`.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("lockproc: working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("lockproc: no go.mod at or above %s", wd)
		}
		dir = parent
	}
}
