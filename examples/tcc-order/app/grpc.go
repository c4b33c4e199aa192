package app

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
)

// ListenGRPC listens on addr (port 0 picks one) for a gRPC server: the service reports the
// address in GET /healthz ("grpc"), where the demo harness reads it.
func ListenGRPC(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s (gRPC): %w", addr, err)
	}
	return ln, nil
}

// ServeGRPC serves srv on ln until ctx ends, then stops it gracefully (calls in flight have 5 s
// to finish).
func ServeGRPC(ctx context.Context, ln net.Listener, srv *grpc.Server) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-stopped
	}
	<-errc
	return nil
}
