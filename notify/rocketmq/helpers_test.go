package rocketmq_test

import (
	"testing"

	"github.com/txkit/txkit/notify"
	"github.com/txkit/txkit/notify/rocketmq"
	obrocketmq "github.com/txkit/txkit/rocketmq"
)

// shopOnly builds the handler of an intake that allows the receiver "shop" only.
func shopOnly(t *testing.T) func(*notify.Notifier) obrocketmq.Handler {
	return func(n *notify.Notifier) obrocketmq.Handler {
		h, err := rocketmq.NewHandler(n, rocketmq.JSON, rocketmq.WithReceivers("shop"))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}
