//go:build linux

package metrics

import (
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Programs lists the BPF programs to report, by backend and program name
// (session.Shared.Programs); it is called at each scrape, so programs
// loaded or closed meanwhile are seen as they are.
type Programs func() map[string]map[string]*ebpf.Program

// EnableBPFStats turns the kernel's BPF run-time statistics on
// (BPF_ENABLE_STATS, BPF_STATS_RUN_TIME; as sysctl kernel.bpf_stats_enabled
// does) and registers a collector of progs' run time and run count. The
// statistics stay on, for every BPF program on the host, until the
// returned Closer is closed (the kernel counts its holders).
//
// Cost: with the statistics on, the kernel reads the clock before and
// after each run of every BPF program and adds to per-CPU counters:
// tens of nanoseconds per run (two sched_clock reads and an update),
// which for the syscall tracepoints is paid on every syscall of every
// process while they are attached. Off (the default), a run pays nothing.
func (m *Metrics) EnableBPFStats(progs Programs) (io.Closer, error) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("metrics: enable the kernel's BPF run-time statistics: %w", err)
	}
	if err := m.reg.Register(newBPFCollector(progs)); err != nil {
		stats.Close()
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return stats, nil
}

// bpfCollector reads the programs' statistics at scrape time.
type bpfCollector struct {
	progs                 Programs
	runtime, runs, misses *prometheus.Desc
}

func newBPFCollector(progs Programs) *bpfCollector {
	labels := []string{"backend", "program"}
	return &bpfCollector{progs: progs,
		runtime: prometheus.NewDesc("klock_bpf_program_run_seconds_total",
			"Time klockd's BPF programs ran since they were loaded (the kernel's run-time statistics: counted only while klockd --metrics-bpf-stats is on).", labels, nil),
		runs: prometheus.NewDesc("klock_bpf_program_runs_total",
			"Runs of klockd's BPF programs since they were loaded (counted only while the statistics are on).", labels, nil),
		misses: prometheus.NewDesc("klock_bpf_program_recursion_misses_total",
			"Runs of klockd's BPF programs the kernel skipped because another BPF program was running on the CPU (their events are lost).", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *bpfCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runtime
	ch <- c.runs
	ch <- c.misses
}

// Collect implements prometheus.Collector: a program whose statistics
// cannot be read (closed meanwhile) is left out of this scrape.
func (c *bpfCollector) Collect(ch chan<- prometheus.Metric) {
	for backend, progs := range c.progs() {
		for name, p := range progs {
			st, err := p.Stats()
			if err != nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.runtime, prometheus.CounterValue, st.Runtime.Seconds(), backend, name)
			ch <- prometheus.MustNewConstMetric(c.runs, prometheus.CounterValue, float64(st.RunCount), backend, name)
			ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(st.RecursionMisses), backend, name)
		}
	}
}
