package outbox

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/txkit/txkit/internal/pgutil"
	"github.com/txkit/txkit/message"
)

// Message is one message in the outbox: recorded in the caller's transaction by Enqueue, then
// delivered at least once by the Relay through a [Publisher]. It is [message.Message], shared with
// transactional messages and consumers (see package message for why it lives there); its Tags
// are stored with the row and sent as the message's RocketMQ tag.
type Message = message.Message

// MaxTagsLen is the largest [Message].Tags [Outbox.Enqueue] accepts, in bytes.
const MaxTagsLen = 255

// checkTags refuses tags PostgreSQL cannot store or a RocketMQ subscription cannot match: what
// rocketmq.CheckTag refuses, plus invalid UTF-8 and NUL bytes.
func checkTags(tags string) error {
	switch {
	case !utf8.ValidString(tags) || strings.IndexByte(tags, 0) >= 0:
		return errors.New("not valid UTF-8 or contains a NUL byte")
	case strings.Contains(tags, "||"):
		return errors.New(`contains "||", the separator of tag expressions`)
	case strings.ContainsAny(tags, "\x01\x02"):
		return errors.New("contains byte 0x01 or 0x02")
	case strings.TrimSpace(tags) != tags:
		return errors.New("begins or ends with white space")
	}
	return nil
}

// Publisher delivers messages to a broker. Publish blocks until the broker has acknowledged msg
// (then it returns nil) or the send failed or ctx ended (then the message may or may not have
// been delivered: the relay will send it again, with the same ID). An error wrapping
// [ErrInvalidMessage] says the broker can never carry msg (a topic name it does not allow, say):
// the relay makes the message dead at once instead of retrying it. Implementations must be safe
// for concurrent use. Package github.com/txkit/txkit/rocketmq provides the RocketMQ one.
type Publisher interface {
	Publish(ctx context.Context, msg Message) error
}

// DBTX is what Enqueue and the operator functions need from the database: satisfied by pgx.Tx,
// *pgx.Conn and *pgxpool.Pool, so they run in the caller's transaction.
type DBTX = pgutil.DBTX // the one interface of every txkit package (Exec, Query, QueryRow)
