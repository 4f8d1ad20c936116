//go:build linux

package harness

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DNSSecret is what the "dnsleak" step hides in its queries besides the
// name: no upstream of the session's DNS proxy may see it.
const DNSSecret = "klock-dns-secret-payload"

// dnsLeak sends resolv.conf's name server an A query for name carrying
// DNSSecret in an EDNS option, an additional and an authority record, the
// name in mixed case (0x20 bits), over UDP then TCP; nil when both
// answers are NOERROR with the query's id and its question as asked.
func dnsLeak(name string) error {
	server, err := nameServer()
	if err != nil {
		return err
	}
	var b strings.Builder
	for i, c := range dns.Fqdn(name) {
		if i%2 == 0 {
			c = []rune(strings.ToUpper(string(c)))[0]
		}
		b.WriteRune(c)
	}
	for _, network := range []string{"udp", "tcp"} {
		m := new(dns.Msg)
		m.SetQuestion(b.String(), dns.TypeA)
		m.SetEdns0(4096, true)
		o := m.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte(DNSSecret)},
			&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		m.Extra = append(m.Extra, &dns.TXT{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{DNSSecret}})
		m.Ns = append(m.Ns, &dns.TXT{Hdr: dns.RR_Header{Name: "y.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{DNSSecret}})
		r, _, err := (&dns.Client{Net: network, Timeout: 3 * time.Second}).Exchange(m, net.JoinHostPort(server, "53"))
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", network, err)
		case r.Id != m.Id || len(r.Question) != 1 || r.Question[0].Name != m.Question[0].Name || r.Rcode != dns.RcodeSuccess:
			return fmt.Errorf("%s: answered id %d (asked %d), question %v (asked %s), %s", network, r.Id, m.Id, r.Question, m.Question[0].Name, dns.RcodeToString[r.Rcode])
		}
	}
	return nil
}

// nameServer is /etc/resolv.conf's first name server.
func nameServer() (string, error) {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) >= 2 && f[0] == "nameserver" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no name server in /etc/resolv.conf")
}
