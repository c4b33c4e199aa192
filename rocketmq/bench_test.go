package rocketmq_test

import (
	"context"
	"testing"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/google/uuid"

	"github.com/txkit/txkit/internal/testkit/testenv"
	"github.com/txkit/txkit/outbox"
	"github.com/txkit/txkit/rocketmq"
)

// BenchmarkPublish sends 256-byte messages with a key and two headers, one at a time, to a topic
// of its own: the raw client's SendSync (the baseline, same properties, the client's hash
// selector) and Publisher.Publish side by side. Compare the msgs/s of the two in one run.
func BenchmarkPublish(b *testing.B) {
	ns := testenv.Namesrv(b)
	topic := testenv.Topic(b)
	body := make([]byte, 256)
	headers := map[string]string{"event": "user.registered", "trace": "0af7651916cd43dd8448eb211c80319c"}
	keys := []string{"user-1", "user-2", "user-3", "user-4", "user-5", "user-6", "user-7", "user-8"}

	b.Run("raw-SendSync", func(b *testing.B) {
		p, err := rmq.NewProducer(
			producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
			producer.WithGroupName("txkit-bench-raw"),
			producer.WithInstanceName("txkit-bench-raw-"+uuid.NewString()[:8]),
			producer.WithRetry(2),
			producer.WithQueueSelector(producer.NewHashQueueSelector()),
		)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(); err != nil {
			b.Fatal(err)
		}
		defer p.Shutdown() //nolint:errcheck // benchmark cleanup
		ctx := context.Background()
		i := 0
		for b.Loop() {
			id := uuid.NewString()
			m := primitive.NewMessage(topic, body)
			m.WithKeys([]string{id})
			m.WithShardingKey(keys[i%len(keys)])
			m.WithProperties(map[string]string{"KEYS": id, "SHARDING_KEY": keys[i%len(keys)], "txkit_id": id,
				"event": headers["event"], "trace": headers["trace"]})
			res, err := p.SendSync(ctx, m)
			if err != nil || res.Status != primitive.SendOK {
				b.Fatalf("SendSync: %v", err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})

	b.Run("Publisher", func(b *testing.B) {
		pub, err := rocketmq.NewPublisher(context.Background(), ns)
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		ctx := context.Background()
		i := 0
		for b.Loop() {
			err := pub.Publish(ctx, outbox.Message{ID: uuid.New(), Topic: topic, Key: keys[i%len(keys)], Body: body, Headers: headers})
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}
