package drillkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/txkit/txkit/examples/exapp"
)

// binCache returns the directory [Build] links example's services into for the module at root —
// $TXKIT_HOME/drill-bin/<hash of root>/<example> (TXKIT_HOME defaults to root/.txkit, as for the
// servers), so that two checkouts never share one — holding its lock file locked: test processes
// building the same example at once (the drills of several packages) take turns. unlock releases
// it. Waiting for the lock ends with ctx.
func binCache(ctx context.Context, root, example string) (dir string, unlock func(), err error) {
	home, err := filepath.Abs(exapp.Env("TXKIT_HOME", filepath.Join(root, ".txkit")))
	if err != nil {
		return "", nil, fmt.Errorf("drill binaries: %w", err)
	}
	sum := sha256.Sum256([]byte(root))
	dir = filepath.Join(home, "drill-bin", hex.EncodeToString(sum[:6]), example)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("drill binaries: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", nil, fmt.Errorf("drill binaries: %w", err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return dir, func() { _ = f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return "", nil, fmt.Errorf("drill binaries: lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return "", nil, fmt.Errorf("drill binaries: lock %s: %w", f.Name(), ctx.Err())
		case <-tick.C:
		}
	}
}

// copyFile copies the executable src to dst through a new file renamed over dst, so that a
// service still running from an earlier dst keeps its own file.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close() //nolint:errcheck // read only
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+"-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	err = errors.Join(err, out.Chmod(0o755), out.Close())
	if err == nil {
		err = os.Rename(out.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(out.Name())
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
