//go:build linux

package session

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
)

// TestStartLookupObeysTheProxysRules: with a DNS proxy of its own, a
// session's start lookup opens only what the proxy would (no rebinding
// unless the address is declared; the hosts file's names as they are),
// and a name that does not resolve yet does not refuse the session;
// without one, it does.
func TestStartLookupObeysTheProxysRules(t *testing.T) {
	answers := map[string][]netip.Addr{
		"svc.test":      {netip.MustParseAddr("127.0.0.31"), netip.MustParseAddr("198.51.100.7")},
		"inner.test":    {netip.MustParseAddr("10.1.2.3")},
		"declared.test": {netip.MustParseAddr("10.9.9.9")},
		"localhost":     {netip.MustParseAddr("127.0.0.1")},
		"empty.test":    nil,
	}
	resolve := func(_ context.Context, h string) ([]netip.Addr, error) {
		if a, ok := answers[h]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	_, rs := compileFor(t, t.TempDir(), "CONSUMES NET:svc.test:443/tcp", "CONSUMES NET:10.9.9.0/24:443/tcp")
	log := slog.New(slog.DiscardHandler)
	proxied := startLookup(context.Background(), resolve, rs, true, log)
	for h, want := range map[string][]netip.Addr{
		"svc.test":      {netip.MustParseAddr("198.51.100.7")},
		"inner.test":    nil,
		"declared.test": {netip.MustParseAddr("10.9.9.9")},
		"localhost":     {netip.MustParseAddr("127.0.0.1")},
		"missing.test":  nil,
	} {
		got, err := proxied(h)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("proxied %s = %v, %v; want %v", h, got, err, want)
		}
	}
	direct := startLookup(context.Background(), resolve, rs, false, log)
	if got, err := direct("svc.test"); err != nil || len(got) != 2 {
		t.Errorf("without a proxy, svc.test = %v, %v: want every address", got, err)
	}
	for _, h := range []string{"missing.test", "empty.test"} {
		if _, err := direct(h); err == nil {
			t.Errorf("without a proxy, %s resolved to nothing and no error", h)
		}
	}
}
