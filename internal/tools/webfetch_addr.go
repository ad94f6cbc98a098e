package tools

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/maka-agent/maka/internal/permsyntax"
)

// WebFetchURLMaxBytes bounds the url argument of WebFetch (the bound of the
// approval review that shows it).
const WebFetchURLMaxBytes = 4096

// parseWebURL checks a URL WebFetch may request and returns it in the form
// the request is made with: http or https only, no user name or password,
// a host name IDNA-normalised to lower-case ASCII (see normHost), a port
// in 1-65535 if one is given, no fragment. It says nothing of the address
// the host resolves to: that is checked on every connection (dialControl).
func parseWebURL(raw string) (*url.URL, error) {
	if len(raw) > WebFetchURLMaxBytes {
		return nil, fmt.Errorf("the URL is longer than %d bytes", WebFetchURLMaxBytes)
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("not a valid URL: %v", unwrapURLError(err))
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return nil, errors.New("the URL has no scheme; only http:// and https:// URLs can be fetched")
	default:
		return nil, fmt.Errorf("the scheme %q is refused; only http:// and https:// URLs can be fetched", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, errors.New("not a valid URL: it has no host (write http://host/path)")
	}
	if u.User != nil {
		return nil, errors.New("URLs with a user name or password are refused")
	}
	host, err := normHost(u.Hostname())
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("the port %q is not in 1-65535", port)
		}
		port = strconv.Itoa(n)
	} else if strings.HasSuffix(u.Host, ":") {
		return nil, errors.New("the URL has an empty port")
	}
	out := *u
	out.Host = hostPort(host, port)
	out.Fragment, out.RawFragment = "", ""
	return &out, nil
}

// unwrapURLError drops url.Error's repetition of the whole URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hostPort joins a normalised host and an optional port as URL.Host.
func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" {
		return host
	}
	return host + ":" + port
}

// normHost is the form hosts are compared in (permsyntax.NormHost).
func normHost(h string) (string, error) { return permsyntax.NormHost(h) }

// Address ranges WebFetch does not connect to unless a permission rule
// names the host (RuleKindDomain): this host, private networks, shared
// address space (CGNAT), link-local, multicast, reserved and documentation
// ranges, and their IPv6 counterparts.
var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // this network, unspecified
		"10.0.0.0/8",      // private
		"100.64.0.0/10",   // shared address space (CGNAT)
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local (cloud metadata services)
		"172.16.0.0/12",   // private
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"192.88.99.0/24",  // 6to4 relay anycast
		"192.168.0.0/16",  // private
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, broadcast
		"::/96",           // unspecified, loopback, IPv4-compatible
		"::ffff:0:0:0/96", // IPv4-translated
		"64:ff9b:1::/48",  // local-use IPv4/IPv6 translation
		"100::/64",        // discard
		"2001::/23",       // IETF protocol assignments (Teredo among them)
		"2001:db8::/32",   // documentation
		"fc00::/7",        // unique local
		"fe80::/10",       // link-local
		"fec0::/10",       // site-local (deprecated)
		"ff00::/8",        // multicast
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Prefixes of IPv6 addresses that carry an IPv4 address, which is checked
// in their place.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// blockedAddr says why WebFetch does not connect to a: "" for a public
// address, else the kind of range it is in. An IPv4-mapped, NAT64 or 6to4
// IPv6 address is judged by the IPv4 address it carries.
func blockedAddr(a netip.Addr) string {
	a = a.WithZone("")
	if !a.IsValid() {
		return "an invalid address"
	}
	if a.Is4In6() {
		a = a.Unmap()
	}
	if a.Is6() {
		b := a.As16()
		switch {
		case nat64Prefix.Contains(a):
			a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case sixToFour.Contains(a):
			a = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		}
	}
	switch {
	case a.IsUnspecified():
		return "an unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsPrivate():
		return "a private address"
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			if p.Bits() == 10 && a.Is4() {
				return "a shared (CGNAT) address"
			}
			return "a reserved or non-public address"
		}
	}
	return ""
}

// blockedAddrError is a connection WebFetch refused.
type blockedAddrError struct {
	addr netip.Addr
	why  string
}

func (e *blockedAddrError) Error() string {
	return fmt.Sprintf("%s is %s", e.addr, e.why)
}

// dialControl is the net.Dialer Control of WebFetch's connections: it runs
// for every address actually dialed, after name resolution, so neither a
// name that resolves to a private address (DNS rebinding included) nor a
// redirect reaches one unless privateOK (a permission rule names the host
// being dialed).
func dialControl(privateOK bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if network != "tcp4" && network != "tcp6" {
			return fmt.Errorf("network %q refused", network)
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("address %q refused: %v", address, err)
		}
		if privateOK {
			return nil
		}
		if why := blockedAddr(ap.Addr()); why != "" {
			return &blockedAddrError{addr: ap.Addr(), why: why}
		}
		return nil
	}
}

// blockedLiteral is the refusal of a URL whose host is an IP address in a
// blocked range, before anything is dialed (dialControl would refuse it
// too).
func blockedLiteral(host string) error {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if why := blockedAddr(a); why != "" {
		return &blockedAddrError{addr: a, why: why}
	}
	return nil
}

// splitDialHost is the host of a dial address "host:port".
func splitDialHost(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
