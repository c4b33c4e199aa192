package rocketmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/google/uuid"

	"github.com/txkit/txkit/message"
	"github.com/txkit/txkit/outbox"
)

// The message properties this package writes. Consumers in other languages read them as plain
// RocketMQ user properties.
//
// A message's identity is its txkit id: the KEYS of the RocketMQ message and [PropertyID]. The
// broker's message id (msgId, the UNIQ_KEY the client sets at each send) is not: the same message
// published again — by the outbox relay after a failover or a lost acknowledgement, or by a send
// retry — keeps its txkit id and gets a new msgId. A consumer in any language de-duplicates by
// KEYS or txkit_id, as [Consumer] does, never by msgId.
const (
	// PropertyID carries [message.Message].ID in its canonical text form: the message's identity,
	// the same in every copy of it. The message's RocketMQ keys (KEYS) carry it as well, so it
	// can be found with the broker's query-by-key tools.
	PropertyID = "txkit_id"
	// PropertyKey carries [message.Message].Key when it is not empty. (Tags travel as the
	// RocketMQ message's own tag, TAGS, not as a property.)
	PropertyKey = "txkit_key"
	// PropertyHeaders lists the names of the message's [message.Message].Headers as a JSON array;
	// each header travels as a property of its own name. The list tells headers apart from the
	// properties the client and the broker add, and keeps headers whose value is empty (RocketMQ
	// drops empty properties).
	PropertyHeaders = "txkit_headers"
	// PropertyTxID carries the transaction id of a [TxProducer] message (the message's ID); the
	// check-back looks it up in the TxProducer's table.
	PropertyTxID = "txkit_tx"
)

// probeProperty marks a message that must not be sent: keySelector selects no queue for it, so
// the client looks its topic's route up and gives up. See TxProducer.register.
const probeProperty = "txkit_probe"

// reservedPrefix marks property names this package keeps for itself.
const reservedPrefix = "txkit_"

// reserved holds the property names RocketMQ clients and brokers (4.x and 5.x) set or interpret
// themselves (Java MessageConst). A header must not use one.
var reserved = map[string]bool{}

func init() {
	for _, n := range []string{
		"KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
		"MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
		"MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
		"CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "TRANSACTION_CHECK_TIMES",
		"CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
		"ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "SHARDING_KEY", "__transactionId__",
		"__STARTDELIVERTIME", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
		"TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY",
		"__SHARDINGKEY", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "INNER_NUM", "bname",
		"__BORNHOST", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "SUPPORT_BATCH", "_CONSUME_START_TIME",
		"TRACE_CONTEXT", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "SHARDING_KEY_LONG",
	} {
		reserved[n] = true
	}
}

// maxPropertiesLen keeps the encoded properties below RocketMQ's 16-bit length field, with room
// for what the client adds (UNIQ_KEY, TRAN_MSG, PGROUP, retry properties).
const maxPropertiesLen = 32767 - 1024

// encode turns msg into a RocketMQ message: keys = id, tag = tags, properties = headers plus
// PropertyID, PropertyKey and PropertyHeaders. It refuses (with outbox.ErrInvalidMessage) what RocketMQ
// cannot carry faithfully.
func encode(msg message.Message) (*primitive.Message, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("rocketmq: message %s: "+format+": %w", append([]any{msg.ID}, append(args, outbox.ErrInvalidMessage)...)...)
	}
	if msg.ID == uuid.Nil {
		return nil, bad("zero ID")
	}
	if err := checkName("topic", msg.Topic, maxTopicLen); err != nil {
		return nil, bad("topic %q is not a RocketMQ topic name", msg.Topic)
	}
	if hasSeparator(msg.Key) {
		return nil, bad("key contains byte 0x01 or 0x02, RocketMQ's property separators")
	}
	if err := CheckTag(msg.Tags); err != nil {
		return nil, bad("%v", err)
	}
	m := primitive.NewMessage(msg.Topic, msg.Body)
	id := msg.ID.String()
	m.WithKeys([]string{id})
	m.WithProperty(PropertyID, id)
	m.WithProperty(PropertyKey, msg.Key)
	if msg.Tags != "" {
		m.WithTag(msg.Tags)
	}
	if len(msg.Headers) > 0 {
		names := make([]string, 0, len(msg.Headers))
		for name, value := range msg.Headers {
			switch {
			case name == "":
				return nil, bad("empty header name")
			case reserved[name] || strings.HasPrefix(name, reservedPrefix):
				return nil, bad("header %q is a reserved RocketMQ or txkit property", name)
			case strings.ContainsAny(name, " \t\r\n") || hasSeparator(name) || hasSeparator(value):
				return nil, bad("header %q: names may not contain white space, names and values not bytes 0x01 or 0x02", name)
			}
			names = append(names, name)
			m.WithProperty(name, value)
		}
		sort.Strings(names)
		list, err := json.Marshal(names)
		if err != nil {
			return nil, bad("header names: %v", err)
		}
		m.WithProperty(PropertyHeaders, string(list))
	}
	if n := len(m.MarshallProperties()); n > maxPropertiesLen {
		return nil, bad("headers and key take %d bytes, more than RocketMQ's %d", n, maxPropertiesLen)
	}
	return m, nil
}

// CheckTag reports why tag cannot be a message's RocketMQ tag ([message.Message].Tags), or nil
// when it can (the empty tag, no tag, can). A tag may not contain "||", the separator of tag
// expressions, nor bytes 0x01 or 0x02, RocketMQ's property separators, nor begin or end with
// white space, which subscriptions trim; the outbox checks it in Enqueue the same way.
func CheckTag(tag string) error {
	switch {
	case tag == "":
		return nil
	case strings.Contains(tag, "||"):
		return fmt.Errorf("tag %q contains \"||\", the separator of tag expressions", tag)
	case hasSeparator(tag):
		return fmt.Errorf("tag %q contains byte 0x01 or 0x02", tag)
	case strings.TrimSpace(tag) != tag:
		return fmt.Errorf("tag %q begins or ends with white space", tag)
	}
	return nil
}

func hasSeparator(s string) bool { return strings.ContainsAny(s, "\x01\x02") }

var errNoID = errors.New("no txkit id: neither property " + PropertyID + " nor a key is a UUID")

// decode turns a received message back into a message.Message. The ID comes from PropertyID, or
// failing that from the first of the message's keys that is a UUID (a message sent by another
// producer). A message without one cannot be deduplicated: decode reports it and the Consumer
// treats it as poison.
func decode(m *primitive.MessageExt) (message.Message, error) {
	var msg message.Message
	if v := m.GetProperty(PropertyID); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return msg, fmt.Errorf("property %s %q: %w", PropertyID, v, err)
		}
		msg.ID = id
	} else {
		for _, k := range strings.Fields(m.GetKeys()) {
			if id, err := uuid.Parse(k); err == nil {
				msg.ID = id
				break
			}
		}
		if msg.ID == uuid.Nil {
			return msg, errNoID
		}
	}
	msg.Topic = m.Topic
	msg.Key = m.GetProperty(PropertyKey)
	msg.Tags = m.GetTags()
	msg.Body = m.Body
	props := m.GetProperties()
	if list, ok := props[PropertyHeaders]; ok {
		var names []string
		if err := json.Unmarshal([]byte(list), &names); err != nil {
			return msg, fmt.Errorf("property %s %q: %w", PropertyHeaders, list, err)
		}
		if len(names) > 0 {
			msg.Headers = make(map[string]string, len(names))
			for _, n := range names {
				msg.Headers[n] = props[n] // absent when the value was empty
			}
		}
		return msg, nil
	}
	// Not sent by this package: every property that is neither RocketMQ's nor ours is a header.
	for n, v := range props {
		if reserved[n] || strings.HasPrefix(n, reservedPrefix) || n == PropertyTraceParent || n == PropertyTraceState {
			continue // the trace context is the Consumer's span's parent, not a header
		}
		if msg.Headers == nil {
			msg.Headers = make(map[string]string)
		}
		msg.Headers[n] = v
	}
	return msg, nil
}

// keySelector picks the queue for a message: by FNV-1a hash of its PropertyKey, so that messages
// with the same key go to the same queue while the topic's queues stay the same, or round robin
// when the key is empty. It is safe for concurrent use.
//
// The hash indexes the queues in (broker name, queue id) order, not in the order the client lists
// them: v2.1.2 sorts a topic's brokers with a comparator that is not an order
// (internal/route.go, routeData2PublishInfo), so with several brokers its list may change order
// on a route refresh, and the client's own hash selector with it.
//
// A key waits for its broker: the hash indexes every queue of the topic seen since the selector
// began, not only those of the current route, so that a broker group leaving the route (a master
// of a multi-master cluster that died) moves no key. A key whose queue is gone from the route
// keeps that queue, and its sends fail until the group is back; the relay retries them, and the
// key's later messages wait behind them (docs/production.md, "Brokers").
type keySelector struct {
	next  atomic.Uint32
	mu    sync.Mutex
	known map[string][]*primitive.MessageQueue // by topic: every queue seen, sorted by queueCmp
}

func (s *keySelector) Select(m *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	if len(mqs) == 0 || m.GetProperty(probeProperty) != "" {
		return nil
	}
	if k := m.GetProperty(PropertyKey); k != "" {
		qs := s.queues(m.Topic, mqs)
		return qs[keyHash(k)%uint32(len(qs))]
	}
	return mqs[(s.next.Add(1)-1)%uint32(len(mqs))]
}

// queues returns the queues of topic seen so far, mqs (the current route) added, sorted. The
// slice returned is never written again (a new one replaces it when a queue is added).
func (s *keySelector) queues(topic string, mqs []*primitive.MessageQueue) []*primitive.MessageQueue {
	s.mu.Lock()
	defer s.mu.Unlock()
	known := s.known[topic]
	var added []*primitive.MessageQueue
	for _, q := range mqs {
		if _, found := slices.BinarySearchFunc(known, q, queueCmp); !found && !slices.ContainsFunc(added, func(a *primitive.MessageQueue) bool { return queueCmp(a, q) == 0 }) {
			added = append(added, q)
		}
	}
	if len(added) == 0 {
		return known
	}
	all := append(slices.Clone(known), added...)
	slices.SortFunc(all, queueCmp)
	if s.known == nil {
		s.known = map[string][]*primitive.MessageQueue{}
	}
	s.known[topic] = all
	return all
}

func queueCmp(a, b *primitive.MessageQueue) int {
	if c := strings.Compare(a.BrokerName, b.BrokerName); c != 0 {
		return c
	}
	return a.QueueId - b.QueueId
}

func keyHash(k string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(k))
	return h.Sum32()
}
