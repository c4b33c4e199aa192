// Package httpsafe answers HTTP errors without internal detail: the error (driver messages,
// hosts, users, file paths) is logged with a fresh request id, and the client gets a short
// message naming that id, so an operator can find the log line the client quotes.
package httpsafe

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// RequestID returns a new random request id (16 hex digits).
func RequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Error logs err at level Error with msg and a new request id (key request_id) plus attrs, and
// answers code with the plain text "msg (request id ID)". It returns the id.
func Error(w http.ResponseWriter, log *slog.Logger, code int, msg string, err error, attrs ...any) string {
	id := Log(log, msg, err, attrs...)
	http.Error(w, msg+" (request id "+id+")", code)
	return id
}

// Log logs err at level Error with msg and a new request id (key request_id) plus attrs, and
// returns the id, for handlers that answer in a format of their own (JSON).
func Log(log *slog.Logger, msg string, err error, attrs ...any) string {
	id := RequestID()
	if log != nil {
		log.Error(msg, append([]any{slog.String("request_id", id), slog.Any("err", err)}, attrs...)...)
	}
	return id
}
