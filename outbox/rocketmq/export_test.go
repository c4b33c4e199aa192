package rocketmq

// WithheldSecondPhase makes a TxProducer commit the local transaction and then answer UNKNOW, so
// that the broker delivers the message only after a check-back. For tests of the check-back path.
func WithheldSecondPhase() Option { return withheldSecondPhase() }

// Encode and Decode expose the codec to the external test package.
var (
	Encode = encode
	Decode = decode
)
