// Package refusal reads a participant's refusal (HTTP 409): the text of an error wrapping
// participant.ErrRefused, as package participant/barrier answers it and participant.HTTP reads it.
package refusal

import "strings"

// Reason returns what msg, the text of a refusal, says beyond refused (the text of
// participant.ErrRefused): "insufficient stock" of "insufficient stock: participant: refused" and
// of "participant: refused: insufficient stock", "" of "participant: refused", msg itself when it
// names no refusal (another server's 409).
func Reason(msg, refused string) string {
	msg = strings.TrimSpace(msg)
	switch {
	case msg == refused:
		return ""
	case strings.HasPrefix(msg, refused+": "):
		return msg[len(refused)+2:]
	case strings.HasSuffix(msg, ": "+refused):
		return msg[:len(msg)-len(refused)-2]
	}
	return msg
}
