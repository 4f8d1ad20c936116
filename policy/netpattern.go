package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Proto restricts a network intent to one transport.
type Proto uint8

const (
	ProtoAny Proto = iota
	ProtoTCP
	ProtoUDP
)

func (p Proto) String() string { return [...]string{"any", "tcp", "udp"}[p] }

// MarshalText renders the protocol name.
func (p Proto) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// PortRange is an inclusive port range; 0-65535 is "*".
type PortRange struct{ Lo, Hi uint16 }

// AllPorts is "*".
var AllPorts = PortRange{0, 65535}

func (r PortRange) String() string {
	switch {
	case r == AllPorts:
		return "*"
	case r.Lo == r.Hi:
		return strconv.Itoa(int(r.Lo))
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// Contains reports whether port is in the range.
func (r PortRange) Contains(port uint16) bool { return port >= r.Lo && port <= r.Hi }

// NetPattern is the object of a NET intent: an address prefix or a host name
// (resolved by the enforcer at session start, and followed through the
// session's DNS proxy while it runs), a port range and a protocol. A host
// name may be a wildcard "*.example.com": one leading "*" label standing
// for one or more labels (a.example.com, a.b.example.com, never
// example.com itself). Raw and packet sockets are their own object: NET:raw.
type NetPattern struct {
	Prefix netip.Prefix // valid when the host is an IP or CIDR
	Host   string       // DNS name (lower case, no trailing dot) or "*." wildcard when not an address
	Ports  PortRange
	Proto  Proto
	Raw    bool // NET:raw: raw and packet sockets
}

func (n NetPattern) String() string {
	if n.Raw {
		return "raw"
	}
	var host string
	switch {
	case n.Host != "":
		host = n.Host
	case n.Prefix.Addr().Is6():
		if n.Prefix.IsSingleIP() {
			host = "[" + n.Prefix.Addr().String() + "]"
		} else {
			host = "[" + n.Prefix.String() + "]"
		}
	case n.Prefix.IsSingleIP():
		host = n.Prefix.Addr().String()
	default:
		host = n.Prefix.String()
	}
	s := host + ":" + n.Ports.String()
	if n.Proto != ProtoAny {
		s += "/" + n.Proto.String()
	}
	return s
}

// ParseNetPattern reads host:port[/proto] where host is a DNS name, an IPv4
// address or CIDR, or a bracketed IPv6 address or CIDR; port is a number, a
// range a-b, or *; proto is tcp or udp. "raw" declares raw/packet sockets.
func ParseNetPattern(s string) (NetPattern, error) {
	if s == "raw" {
		return NetPattern{Raw: true}, nil
	}
	var n NetPattern
	if rest, ok := strings.CutSuffix(s, "/tcp"); ok {
		s, n.Proto = rest, ProtoTCP
	} else if rest, ok := strings.CutSuffix(s, "/udp"); ok {
		s, n.Proto = rest, ProtoUDP
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.HasSuffix(s[:i], ":") && !strings.HasPrefix(s, "[") {
		return n, errors.New("want host:port, e.g. api.example.com:443, 10.0.0.0/8:*, [::1]:8080 (IPv6 in brackets)")
	}
	host, port := s[:i], s[i+1:]
	pr, err := parsePorts(port)
	if err != nil {
		return n, err
	}
	n.Ports = pr
	switch {
	case host == "*" || host == "":
		return n, fmt.Errorf("%w: any host (%q) is not a declaration; write 0.0.0.0/0:%s and [::/0]:%s if you really mean every address", ErrUnenforceable, host, port, port)
	case strings.HasPrefix(host, "["):
		inner, ok := strings.CutSuffix(host[1:], "]")
		if !ok {
			return n, fmt.Errorf("IPv6 host %q lacks its closing bracket", host)
		}
		p, err := parsePrefix(inner)
		switch {
		case err != nil:
			// The reason (host bits set, a zone) says what to write.
			return n, fmt.Errorf("%q is not an IPv6 address or prefix: %w", inner, err)
		case p.Addr().Is4In6():
			return n, fmt.Errorf("%q is an IPv4-mapped address; write the IPv4 form %s (it matches both)", inner, p.Addr().Unmap())
		case !p.Addr().Is6():
			return n, fmt.Errorf("%q is not an IPv6 address or prefix: write an IPv4 address without brackets", inner)
		}
		n.Prefix = p
	case strings.Contains(host, ":"):
		return n, fmt.Errorf("IPv6 address %q must be in brackets: [%s]:%s", host, host, port)
	case strings.HasPrefix(host, "*.") && !strings.ContainsAny(host[2:], "*?"):
		if err := checkHostname(host[2:]); err != nil {
			return n, err
		}
		n.Host = "*." + strings.ToLower(strings.TrimSuffix(host[2:], "."))
	case strings.ContainsAny(host, "*?"):
		return n, fmt.Errorf("%w: wildcard host %q; only one leading label may be a wildcard (*.example.com, matched by the session's DNS proxy): list each other host name", ErrUnenforceable, host)
	default:
		if p, err := parsePrefix(host); err == nil {
			n.Prefix = p
		} else if looksNumeric(host) {
			return n, fmt.Errorf("%q is not a valid IPv4 address or CIDR: %w", host, err)
		} else if err := checkHostname(host); err != nil {
			return n, err
		} else {
			n.Host = strings.ToLower(strings.TrimSuffix(host, "."))
		}
	}
	return n, nil
}

// IsWildcard reports whether the pattern's host is a "*." wildcard: it has
// no addresses until the session's DNS proxy answers a name it matches.
func (n NetPattern) IsWildcard() bool { return strings.HasPrefix(n.Host, "*.") }

// Matches reports whether the DNS name matches the pattern's host: the same
// name (case-insensitive, a trailing dot ignored), or, for "*.example.com",
// a name of one or more labels followed by ".example.com". An address
// pattern matches no name.
func (n NetPattern) Matches(name string) bool {
	if n.Host == "" || n.Raw {
		return false
	}
	name = strings.TrimSuffix(name, ".")
	if suffix, ok := strings.CutPrefix(n.Host, "*."); ok {
		// At least one label before ".suffix"; labels are never empty.
		if len(name) < len(suffix)+2 || name[len(name)-len(suffix)-1] != '.' {
			return false
		}
		head := name[:len(name)-len(suffix)-1]
		return strings.EqualFold(name[len(name)-len(suffix):], suffix) && !strings.HasPrefix(head, ".") && !strings.HasSuffix(head, ".") && !strings.Contains(head, "..")
	}
	return strings.EqualFold(name, n.Host)
}

func looksNumeric(h string) bool {
	return strings.Trim(h, "0123456789./") == ""
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p != p.Masked() {
			return p, fmt.Errorf("prefix %s has host bits set; write %s", p, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zoned address %q is not supported", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parsePorts(s string) (PortRange, error) {
	if s == "*" {
		return AllPorts, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	l, err := parsePort(lo)
	if err != nil {
		return PortRange{}, err
	}
	h := l
	if isRange {
		if h, err = parsePort(hi); err != nil {
			return PortRange{}, err
		}
		if h < l {
			return PortRange{}, fmt.Errorf("port range %s runs backwards; write %d-%d", s, h, l)
		}
	}
	return PortRange{l, h}, nil
}

func parsePort(s string) (uint16, error) {
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q: want a number 0-65535, a range a-b, or *", s)
	}
	return uint16(v), nil
}

func checkHostname(h string) error {
	h = strings.TrimSuffix(h, ".")
	if len(h) > 253 {
		return fmt.Errorf("host name is longer than 253 characters")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host name %q has an empty or over-long label", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok || (c == '-' && (i == 0 || i == len(label)-1)) {
				return fmt.Errorf("host name %q has an invalid character %q", h, c)
			}
		}
	}
	return nil
}
