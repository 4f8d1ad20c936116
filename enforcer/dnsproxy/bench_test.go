package dnsproxy

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkQueryThroughProxy times an A query for a declared name over UDP
// asked straight of a resolver on loopback and asked through the proxy in
// front of it, alternated in the same run (this machine's noise hits
// both), and reports each and what the proxy adds: parsing, checking the
// name, its own question upstream and the rebuilt answer.
func BenchmarkQueryThroughProxy(b *testing.B) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
			A: net.ParseIP("198.51.100.7")})
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	defer srv.Shutdown()
	p, err := Start(Config{Addr: "127.0.0.1:0", Upstreams: []string{pc.LocalAddr().String()}, Hosts: []string{"svc.test"},
		Timeout: time.Second, OnAnswer: func(Answer) error { return nil }, OnRefused: func(Refusal) {}, OnRebinding: func(Rebinding) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion("svc.test.", dns.TypeA)
	ask := func(at string) time.Duration {
		t0 := time.Now()
		r, _, err := c.Exchange(q, at)
		if err != nil || len(r.Answer) != 1 {
			b.Fatalf("query at %s: %v %v", at, r, err)
		}
		return time.Since(t0)
	}
	var direct, proxied time.Duration
	b.ResetTimer()
	for range b.N {
		direct += ask(pc.LocalAddr().String())
		proxied += ask(p.Addr().String())
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n, "direct-us")
	b.ReportMetric(float64(proxied.Microseconds())/n, "proxy-us")
	b.ReportMetric(float64(proxied-direct)/n/1e3, "added-us")
	b.ReportMetric(float64(proxied)/float64(direct), "ratio")
}
