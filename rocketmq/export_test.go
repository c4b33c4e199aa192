package rocketmq

import "github.com/apache/rocketmq-client-go/v2/primitive"

// WithheldSecondPhase makes a TxProducer commit the local transaction and then answer UNKNOW, so
// that the broker delivers the message only after a check-back. For tests of the check-back path.
func WithheldSecondPhase() Option { return withheldSecondPhase() }

// Encode and Decode expose the codec to the external test package.
var (
	Encode = encode
	Decode = decode
)

// NewKeySelector returns the queue selector Publisher and TxProducer use.
func NewKeySelector() interface {
	Select(*primitive.Message, []*primitive.MessageQueue, string) *primitive.MessageQueue
} {
	return &keySelector{}
}

// ProbeProperty marks a message keySelector refuses to place.
const ProbeProperty = probeProperty
