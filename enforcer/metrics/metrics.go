package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are klockd's metrics. Its methods are safe for concurrent use;
// a nil *Metrics records nothing.
type Metrics struct {
	reg *prometheus.Registry
	// own are klock's collectors (not the Go and process ones), for
	// Names.
	own    []prometheus.Collector
	sess   sessionMetrics
	leases leaseMetrics
	guard  guardMetrics
}

// New makes the metrics and their registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.sess = newSessionMetrics(m.register)
	m.leases = newLeaseMetrics(m.register)
	m.guard = newGuardMetrics(m.register)
	return m
}

// register registers klock's own collectors.
func (m *Metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.own = append(m.own, cs...)
}

// Registry is the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry (the /metrics endpoint).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// counter is a counter family's options.
func counter(name, help string) prometheus.CounterOpts {
	return prometheus.CounterOpts{Name: name, Help: help}
}

// oneOf is v when it is one of allowed, else "other": a label's values
// stay a fixed set whatever a log or a caller holds.
func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return "other"
}
