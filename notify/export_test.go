package notify

// DeliveryStatements returns the statements that record a delivery batch's outcomes and hold
// back what the breaker stopped, by name.
func (n *Notifier) DeliveryStatements() map[string]string {
	return map[string]string{"record": n.recordSQL(), "hold": n.holdSQL()}
}
