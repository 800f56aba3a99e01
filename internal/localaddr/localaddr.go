// Package localaddr finds the address by which this machine is reached
// from another host: the local address of the route toward it.
//
// Two floors need it for the same reason, and neither owns it: dist.Init
// gives its rank's default Host (the address the other ranks connect to,
// the one that routes to the store's host), and godist run gives its
// node's default address in the rendezvous (the one its workers are
// reached at, the one that routes to the rendezvous host). The transport
// takes its Host as given and the launcher does not otherwise link it,
// so the choice lives here, below both, a leaf that needs nothing but
// package net.
package localaddr

import (
	"net"
	"strings"
)

// Toward returns the local address that routes to host, an IP address
// or a name, or 127.0.0.1 when host is this machine's loopback ("",
// "localhost", 127.x.y.z) or no route to it is known. It sends nothing:
// it asks the kernel for the route by connecting a UDP socket to host's
// discard port, which only chooses the socket's source address.
func Toward(host string) string {
	if host == "" || host == "localhost" || strings.HasPrefix(host, "127.") {
		return "127.0.0.1"
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
