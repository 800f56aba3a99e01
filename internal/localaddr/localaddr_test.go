package localaddr

import (
	"net"
	"testing"
)

func TestToward(t *testing.T) {
	for _, host := range []string{"", "localhost", "127.0.0.1", "127.3.2.1"} {
		if got := Toward(host); got != "127.0.0.1" {
			t.Errorf("Toward(%q) = %q, want 127.0.0.1", host, got)
		}
	}
	// Whatever the machine's routes, the answer is one of its addresses,
	// or loopback when there is no route.
	for _, host := range []string{"192.0.2.1", "::1"} {
		got := Toward(host)
		ip := net.ParseIP(got)
		if ip == nil {
			t.Errorf("Toward(%q) = %q, not an IP address", host, got)
			continue
		}
		if !ip.IsLoopback() && !isLocal(t, ip) {
			t.Errorf("Toward(%q) = %s, an address of no interface here", host, ip)
		}
	}
}

// isLocal reports whether ip is the address of one of this machine's
// interfaces.
func isLocal(t *testing.T, ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
