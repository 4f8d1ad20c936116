//go:build linux

package leaseapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// BenchmarkAPIGrantRelease measures grant+release pairs through the API on
// its unix socket: 8 concurrent clients (each its own keep-alive
// connection, plain net/http), each acquiring a one-intent manifest on a
// resource of its own and releasing it. One op is one pair (ns/op is the
// server's throughput, not a client's latency); pairs/s is reported. Goal:
// at least 10,000 pairs/s. The rate limit is set high enough
// never to refuse, so its bucket is still paid on every acquire.
//
//	go test ./enforcer/leaseapi -run '^$' -bench APIGrantRelease
func BenchmarkAPIGrantRelease(b *testing.B) {
	const clients = 8
	ts := startServer(b, Config{Rate: 1e9, Burst: 1 << 30})
	type client struct {
		hc      *http.Client
		acquire []byte
		release []byte
	}
	cs := make([]client, clients)
	for i := range cs {
		cs[i] = client{
			hc:      unixHTTP(ts.socket),
			acquire: fmt.Appendf(nil, `{"agent_id":"bench","session_id":"c%d","intents":["MUTATES FILE:/bench/c%d/**"]}`, i, i),
			release: fmt.Appendf(nil, `{"agent_id":"bench","session_id":"c%d"}`, i),
		}
	}
	post := func(hc *http.Client, path string, body []byte, want int) error {
		resp, err := hc.Post("http://klockd"+path, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s: %d", path, resp.StatusCode)
		}
		return nil
	}
	// Warm every connection up outside the timing.
	for _, c := range cs {
		if err := post(c.hc, "/v1/manifest", c.acquire, 200); err != nil {
			b.Fatal(err)
		}
		if err := post(c.hc, "/v1/leases/release", c.release, 200); err != nil {
			b.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	b.ResetTimer()
	start := time.Now()
	for i, c := range cs {
		n := b.N / clients
		if i < b.N%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				err := post(c.hc, "/v1/manifest", c.acquire, 200)
				if err == nil {
					err = post(c.hc, "/v1/leases/release", c.release, 200)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pairs/s")
}
