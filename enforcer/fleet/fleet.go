package fleet

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Marker exists while this host's klockd shares its state with a fleet.
const Marker = "/run/klock/fleet.json"

// MarkerEnv, when set, names the marker file instead of Marker: two
// klockd "hosts" on one machine (make fleet-demo, the fleet tests) each
// keep their own, and so do the klock commands run for each.
const MarkerEnv = "KLOCK_FLEET_MARKER"

// MarkerPath is the marker file this process reads and writes.
func MarkerPath() string {
	if p := os.Getenv(MarkerEnv); p != "" {
		return p
	}
	return Marker
}

// DefaultPrefix is the key prefix of a fleet that names none.
const DefaultPrefix = "/klock"

var (
	// ErrConfig: the fleet configuration cannot be used as given.
	ErrConfig = errors.New("fleet: configuration")
	// ErrNoFleet: this host shares nothing with a fleet (no marker).
	ErrNoFleet = fmt.Errorf("fleet: this host is in no fleet (no %s: klockd runs with --store host, or not at all): %w", Marker, fs.ErrNotExist)
)

// Config is how to reach the fleet's etcd cluster.
type Config struct {
	Endpoints []string `json:"endpoints"`
	// CACert, Cert and Key are PEM files: the CA that signs the servers'
	// certificates, and the client certificate and key klock presents.
	CACert string `json:"cacert,omitempty"`
	Cert   string `json:"cert,omitempty"`
	Key    string `json:"key,omitempty"`
	// Prefix is the fleet's key prefix: one cluster can hold several
	// fleets (tenants) under different prefixes.
	Prefix string `json:"prefix"`
	// Host names this host in the fleet (the HOST of klock leases).
	Host string `json:"host"`
}

// Endpoints splits a comma-separated endpoint list, dropping blanks.
func Endpoints(list string) []string {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// normalize fills defaults and checks what can be checked offline.
func (c *Config) normalize() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: no etcd endpoints (give --etcd-endpoints URL,...)", ErrConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.Prefix == "" || !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("%w: etcd prefix %q: want an absolute key prefix such as /klock", ErrConfig, c.Prefix)
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if (c.Cert == "") != (c.Key == "") {
		return fmt.Errorf("%w: a client certificate needs its key (give both --etcd-cert and --etcd-key)", ErrConfig)
	}
	return nil
}

// tls is the client TLS configuration, nil for plain http endpoints.
func (c *Config) tls() (*tls.Config, error) {
	if c.CACert == "" && c.Cert == "" {
		return nil, nil
	}
	tc, err := transport.TLSInfo{TrustedCAFile: c.CACert, CertFile: c.Cert, KeyFile: c.Key}.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: etcd TLS: %v", ErrConfig, err)
	}
	return tc, nil
}

// Dial returns a client of the cluster (it connects lazily) and the
// normalized configuration.
func Dial(c Config) (*clientv3.Client, Config, error) {
	if err := c.normalize(); err != nil {
		return nil, c, err
	}
	tc, err := c.tls()
	if err != nil {
		return nil, c, err
	}
	// The client's own log (zap, warnings on every retry) would reach
	// the terminal of klock commands and klockd's journal in another
	// format: its failures come back as errors, which klock words.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		return nil, c, fmt.Errorf("%w: etcd client: %v", ErrConfig, err)
	}
	return cli, c, nil
}

// WriteMarker records that this host shares its state with the fleet c.
func WriteMarker(c Config) error {
	if err := c.normalize(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	path := MarkerPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RemoveMarker says this host no longer shares its state with a fleet.
func RemoveMarker() { _ = os.Remove(MarkerPath()) }

// ReadMarker returns the fleet this host's klockd shares its state with,
// or ErrNoFleet.
func ReadMarker() (Config, error) { return readMarker(MarkerPath()) }

func readMarker(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("%w (%s)", ErrNoFleet, path)
	}
	if err != nil {
		return c, fmt.Errorf("%w: read %s: %v", ErrConfig, path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: %s does not parse (%v): remove it if this host has left the fleet, or restart klockd to rewrite it", ErrConfig, path, err)
	}
	return c, c.normalize()
}

// String is the fleet as a message shows it.
func (c Config) String() string {
	return fmt.Sprintf("etcd %s prefix %s as host %s", strings.Join(c.Endpoints, ","), c.Prefix, c.Host)
}
