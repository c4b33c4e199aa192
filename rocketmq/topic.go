package rocketmq

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TopicOption configures [EnsureTopic].
type TopicOption interface {
	applyTopic(*topicOptions)
}

type topicOptions struct {
	queues int // DefaultTopicQueues; tests set it through QueuesForTest
	groups []string
}

type topicOption func(*topicOptions)

func (f topicOption) applyTopic(o *topicOptions) { f(o) }

// DefaultTopicQueues is how many read and write queues [EnsureTopic] gives a topic it creates
// (deploy/local creates its topics with as many).
const DefaultTopicQueues = 4

// WithRetryTopicsFor has [EnsureTopic] also ensure the retry topic %RETRY%<group> of each consumer
// group, with 1 queue as the broker would create it. The broker creates a group's retry topic
// itself when a consumer of the group first connects, but the client learns its route only at its
// next route poll, up to 30 s later: until then it logs "topic not exist" warnings and the
// group's redeliveries wait. Creating it ahead avoids both.
func WithRetryTopicsFor(groups ...string) TopicOption {
	return topicOption(func(o *topicOptions) { o.groups = append(o.groups, groups...) })
}

// EnsureTopic makes sure topic exists: when the name servers do not list it, it creates it on the
// broker at broker (host:port of the broker itself, not of a name server), with
// [DefaultTopicQueues] queues. With [WithRetryTopicsFor] it does the same for the retry topics of
// consumer groups. A topic that exists is left as it is (a topic that needs other queues is
// created with mqadmin). A [Consumer] cannot start on a missing topic (the client
// creates none for consumers), so a program calls EnsureTopic before it runs one, or creates its
// topics with mqadmin (deploy/local/rocketmq topic).
//
// It uses rocketmq-client-go's admin API (admin.NewAdmin, FetchAllTopicList, CreateTopic), which
// in v2.1.2 signs no CreateTopic request: on a broker with ACL on, create topics with mqadmin and
// the admin account. It blocks until the name server and the broker have answered or ctx ends
// (each request is also bounded by the client: 3 s to list, 5 s to create). It is idempotent and
// safe to call from several processes at once: creating a topic twice with the same settings
// leaves one topic. It returns an error wrapping [ErrInvalidOption] for bad arguments.
func EnsureTopic(ctx context.Context, nameservers []string, broker, topic string, opts ...TopicOption) error {
	if err := checkNameservers(nameservers); err != nil {
		return err
	}
	if strings.TrimSpace(broker) == "" || !strings.Contains(broker, ":") {
		return badOption("broker %q is not host:port", broker)
	}
	if err := checkName("topic", topic, maxTopicLen); err != nil {
		return err
	}
	o := topicOptions{queues: DefaultTopicQueues}
	for _, opt := range opts {
		if opt != nil {
			opt.applyTopic(&o)
		}
	}
	if o.queues < 1 || o.queues > 1024 {
		return badOption("queues %d outside [1, 1024]", o.queues)
	}
	want := []struct {
		name   string
		queues int
	}{{topic, o.queues}}
	for _, g := range o.groups {
		if err := checkName("group", g, maxGroupLen); err != nil {
			return err
		}
		want = append(want, struct {
			name   string
			queues int
		}{retryTopic(g), 1})
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rocketmq: ensure topic %s: %w", topic, err)
	}

	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameservers)))
	if err != nil {
		return fmt.Errorf("rocketmq: ensure topic %s: new admin client: %w", topic, err)
	}
	defer adm.Close() //nolint:errcheck // Close reports nothing
	list, err := adm.FetchAllTopicList(ctx)
	if err != nil {
		return fmt.Errorf("rocketmq: ensure topic %s: list topics: %w", topic, err)
	}
	have := make(map[string]bool, len(list.TopicList))
	for _, t := range list.TopicList {
		have[t] = true
	}
	for _, w := range want {
		if have[w.name] {
			continue
		}
		if err := adm.CreateTopic(ctx, admin.WithTopicCreate(w.name), admin.WithBrokerAddrCreate(broker),
			admin.WithReadQueueNums(w.queues), admin.WithWriteQueueNums(w.queues)); err != nil {
			return fmt.Errorf("rocketmq: ensure topic %s: create it on %s: %w", w.name, broker, err)
		}
	}
	return nil
}

// retryTopic is the topic through which the broker redelivers a consumer group's failed messages.
func retryTopic(group string) string { return "%RETRY%" + group }
