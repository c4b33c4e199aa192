package coordinator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txkit/txkit/coordinator"
	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/saga"
	"github.com/txkit/txkit/tcc"
	"github.com/txkit/txkit/threepc"
	"github.com/txkit/txkit/twopc"
)

// Every coordinator's New refuses the same bad shared options the same way, WithElector(nil)
// included (it used to be accepted and refused only by Run).
func TestIntegrationNewRefusesBadSharedOptions(t *testing.T) {
	pool := testenv.PG(t).Pool
	for name, newC := range constructors() {
		for what, opt := range map[string]coordinator.Option{
			"nil elector":                  coordinator.WithElector(nil),
			"nil logger":                   coordinator.WithLogger(nil),
			"zero call timeout":            coordinator.WithRetry(0, time.Second, 5*time.Minute),
			"negative group commit window": coordinator.WithGroupCommit(-time.Millisecond),
			"group commit window over 1s":  coordinator.WithGroupCommit(2 * time.Second),
		} {
			if err := newC(pool, opt); !errors.Is(err, coordinator.ErrInvalidOption) {
				t.Errorf("%s.New with %s = %v, want ErrInvalidOption", name, what, err)
			}
		}
		if err := newC(pool); err != nil {
			t.Errorf("%s.New with the defaults: %v", name, err)
		}
		if err := newC(pool, coordinator.WithGroupCommit(time.Millisecond)); err != nil {
			t.Errorf("%s.New with group commit: %v", name, err)
		}
	}
}

// constructors returns every coordinator's New, by package name, as a function returning only
// its error (the coordinators that hold resources are closed).
func constructors() map[string]func(*pgxpool.Pool, ...coordinator.Option) error {
	return map[string]func(*pgxpool.Pool, ...coordinator.Option) error{
		"tcc":  func(p *pgxpool.Pool, o ...coordinator.Option) error { _, err := tcc.New(p, o...); return err },
		"saga": func(p *pgxpool.Pool, o ...coordinator.Option) error { _, err := saga.New(p, o...); return err },
		"twopc": func(p *pgxpool.Pool, o ...coordinator.Option) error {
			c, err := twopc.New(p, o...)
			if c != nil {
				_ = c.Close()
			}
			return err
		},
		"threepc": func(p *pgxpool.Pool, o ...coordinator.Option) error {
			c, err := threepc.New(p, o...)
			if c != nil {
				_ = c.Close()
			}
			return err
		},
	}
}
