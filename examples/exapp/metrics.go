package exapp

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics gives a service its Prometheus registry and serves it on mux as GET /metrics
// (Prometheus's text format). The registry holds the Go runtime's and the process's collectors;
// the service passes it to the WithRegisterer option of each txkit component it builds
// (coordinator, outbox relay, RocketMQ consumer, notify, idempotency store, barrier, electors),
// so one scrape shows them all. It never touches Prometheus's default registry. Call it once per
// service, before mux is served.
func Metrics(mux *http.ServeMux) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return reg
}
