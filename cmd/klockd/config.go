package main

import (
	"flag"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/internal/flagfile"
	"github.com/klocklabs/klock/internal/logswitch"
	"github.com/klocklabs/klock/policy"
)

// DefaultConfig is klockd's configuration file (deploy/etc/klockd.yaml,
// installed by make install and the Debian package).
const DefaultConfig = "/etc/klock/klockd.yaml"

// configKeys are the keys of klockd's configuration file, each the flag it
// sets: a new flag becomes configurable by one row here (and a commented
// line in deploy/etc/klockd.yaml).
var configKeys = []flagfile.Key{
	{Name: "socket", Flag: "socket"},
	{Name: "group", Flag: "group"},
	{Name: "log_format", Flag: "log-format"},
	{Name: "log_level", Flag: "log-level"},
	{Name: "debug", Flag: "debug"},
	{Name: "syscall_linger", Flag: "syscall-linger"},
	{Name: "require_signed", Flag: "require-signed"},
	{Name: "trust", Flag: "trust"},
	{Name: "trust_dir", Flag: "trust-dir"},
	{Name: "api_socket", Flag: "api-socket"},
	{Name: "api_listen", Flag: "api-listen"},
	{Name: "api_tokens", Flag: "api-tokens"},
	{Name: "api_tls_cert", Flag: "api-tls-cert"},
	{Name: "api_tls_key", Flag: "api-tls-key"},
	{Name: "api_rate", Flag: "api-rate"},
	{Name: "no_api", Flag: "no-api"},
	{Name: "metrics_listen", Flag: "metrics-listen"},
	{Name: "metrics_tls_cert", Flag: "metrics-tls-cert"},
	{Name: "metrics_tls_key", Flag: "metrics-tls-key"},
	{Name: "metrics_bpf_stats", Flag: "metrics-bpf-stats"},
	{Name: "events_file", Flag: "events-file"},
	{Name: "events_file_max_size", Flag: "events-file-max-size"},
	{Name: "events_file_keep", Flag: "events-file-keep"},
	{Name: "store", Flag: "store"},
	{Name: "etcd_endpoints", Flag: "etcd-endpoints"},
	{Name: "etcd_cacert", Flag: "etcd-cacert"},
	{Name: "etcd_cert", Flag: "etcd-cert"},
	{Name: "etcd_key", Flag: "etcd-key"},
	{Name: "etcd_prefix", Flag: "etcd-prefix"},
	{Name: "host_name", Flag: "host-name"},
}

// liveFlags are the settings a reload (SIGHUP) applies to the running
// klockd; a change of any other takes a restart, which kills every session.
var liveFlags = map[string]bool{
	"log-format": true, "log-level": true, "debug": true,
	"require-signed": true, "trust": true, "trust-dir": true,
	"syscall-linger": true,
}

// loadConfig applies --config's file under the command line. The default
// file may be missing; one named on the command line may not.
func (o *options) loadConfig() error {
	if o.configFile == "" {
		return nil
	}
	named := false
	o.fs.Visit(func(f *flag.Flag) { named = named || f.Name == "config" })
	return flagfile.Load(o.fs, o.configFile, configKeys, !named)
}

// reloader re-reads klockd's settings (command line, then file) on SIGHUP
// and applies the live ones; sessions are not touched.
type reloader struct {
	args  []string
	log   *slog.Logger
	logs  *logswitch.Switch
	admit atomic.Pointer[func(*policy.Manifest) error]
	// observer is the daemon's (nil: unavailable), set once it is loaded.
	observer *observe.Observer
	// applied are the settings in effect, by flag, as their flags print
	// them; a reload compares the file's new ones with these.
	applied map[string]string
}

func newReloader(o *options, log *slog.Logger, logs *logswitch.Switch) *reloader {
	return &reloader{args: o.args, log: log, logs: logs, applied: flagValues(o.fs)}
}

// admitNow is the daemon's admitter: the one the last reload made.
func (r *reloader) admitNow(m *policy.Manifest) error { return (*r.admit.Load())(m) }

// flagValues are fs's flags' values as they print them.
func flagValues(fs *flag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { out[f.Name] = f.Value.String() })
	return out
}

// reload reads the settings again; a file klockd cannot read, or a live
// setting it cannot apply, changes nothing (the running settings stay,
// and the error is logged).
func (r *reloader) reload() {
	n, err := parseOptions(r.args)
	if err != nil {
		r.log.Error("reload refused: settings unchanged", "error", err)
		return
	}
	f, l, err := n.logSettings()
	if err != nil {
		r.log.Error("reload refused: settings unchanged", "error", err)
		return
	}
	admit, err := n.admitter()
	if err != nil {
		r.log.Error("reload refused: settings unchanged", "error", err)
		return
	}
	r.logs.Set(f, l)
	r.admit.Store(&admit)
	if r.observer != nil {
		r.observer.SetSyscallLinger(n.linger) // 0: none, as the flag says
	}
	var applied, restart []string
	for name, v := range flagValues(n.fs) {
		if r.applied[name] == v {
			continue
		}
		if liveFlags[name] {
			applied = append(applied, name)
			r.applied[name] = v
		} else {
			restart = append(restart, name)
		}
	}
	slices.Sort(applied)
	slices.Sort(restart)
	r.log.Info("configuration reloaded", "config", n.configFile, "applied", applied, "require_signed", n.requireSigned)
	if len(restart) > 0 {
		r.log.Warn("settings changed that take effect only at a restart (which kills every session)", "settings", restart)
	}
}
