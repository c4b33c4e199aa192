package app

import "fmt"

// Transport is how the order service calls stock and account, and how they serve: HTTP (POST
// /tcc and /saga, the participant wire protocol) or gRPC (the shoppb Stock and Account methods).
type Transport string

// The transports.
const (
	TransportHTTP Transport = "http"
	TransportGRPC Transport = "grpc"
)

// String returns the transport's name.
func (t Transport) String() string { return string(t) }

// Set reads the transport of a flag (flag.Value): http or grpc.
func (t *Transport) Set(s string) error {
	switch Transport(s) {
	case TransportHTTP, TransportGRPC:
		*t = Transport(s)
		return nil
	}
	return fmt.Errorf("transport %q: want http or grpc", s)
}
