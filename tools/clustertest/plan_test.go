package clustertest

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestBitRate(t *testing.T) {
	for s, want := range map[string]BitRate{
		"100mbit": 100 * Mbit, "1gbit": Gbit, "1GBIT": Gbit, "2500000": 2500 * Kbit, "12bit": 12,
		"0": 0, " 10kbit ": 10 * Kbit, "2tbit": 2000 * Gbit,
	} {
		got, err := ParseBitRate(s)
		if err != nil || got != want {
			t.Errorf("ParseBitRate(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "mbit", "-1mbit", "1.5gbit", "100mbps", "9999999999gbit"} {
		if r, err := ParseBitRate(s); err == nil {
			t.Errorf("ParseBitRate(%q) = %d, want an error", s, r)
		}
	}
	for r, want := range map[BitRate]string{100 * Mbit: "100mbit", Gbit: "1gbit", 1500 * Kbit: "1500kbit", 12: "12bit", 0: "0bit", 2000 * Gbit: "2000gbit"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(r), got, want)
		}
		if back, err := ParseBitRate(r.String()); err != nil || back != r {
			t.Errorf("ParseBitRate(%q) = %d, %v: not the rate written", r.String(), back, err)
		}
	}
}

func TestAssignCPUs(t *testing.T) {
	for _, c := range []struct {
		allowed        []int
		hosts, per     int
		share          bool
		want           [][]int
		tooFew, anyErr bool
	}{
		{allowed: []int{0, 1}, hosts: 2, want: [][]int{{0}, {1}}},
		{allowed: []int{0, 1, 2, 3}, hosts: 2, want: [][]int{{0, 1}, {2, 3}}},
		{allowed: []int{0, 1, 2, 3, 4}, hosts: 2, want: [][]int{{0, 1}, {2, 3}}},
		{allowed: []int{2, 5, 7}, hosts: 3, per: 1, want: [][]int{{2}, {5}, {7}}},
		{allowed: []int{0, 1}, hosts: 3, tooFew: true},
		{allowed: []int{0, 1}, hosts: 3, share: true, want: [][]int{{0}, {1}, {0}}},
		{allowed: []int{0, 1, 2}, hosts: 2, per: 2, share: true, want: [][]int{{0, 1}, {2, 0}}},
		{allowed: []int{0, 1}, hosts: 1, per: 3, share: true, tooFew: true},
		{allowed: []int{0, 1}, hosts: 4, per: -1, want: [][]int{nil, nil, nil, nil}},
		{allowed: nil, hosts: 1, anyErr: true},
	} {
		got, err := assignCPUs(c.allowed, c.hosts, c.per, c.share)
		switch {
		case c.tooFew:
			if !errors.Is(err, ErrTooFewCPUs) {
				t.Errorf("assignCPUs(%v, %d, %d, %v) = %v, %v; want ErrTooFewCPUs", c.allowed, c.hosts, c.per, c.share, got, err)
			} else if !c.share && !strings.Contains(err.Error(), "ShareCPUs") {
				t.Errorf("the error does not say how to share: %v", err)
			}
		case c.anyErr:
			if err == nil {
				t.Errorf("assignCPUs(%v, %d, %d, %v) = %v, want an error", c.allowed, c.hosts, c.per, c.share, got)
			}
		case err != nil || !reflect.DeepEqual(got, c.want):
			t.Errorf("assignCPUs(%v, %d, %d, %v) = %v, %v; want %v", c.allowed, c.hosts, c.per, c.share, got, err, c.want)
		}
	}
}

func TestPlan(t *testing.T) {
	p, err := plan(Config{Hosts: 3, Rate: 100 * Mbit, ShareCPUs: true}, []int{0, 1}, 77)
	if err != nil {
		t.Fatal(err)
	}
	want := []hostPlan{
		{"node0", netip.MustParseAddr("10.77.0.1"), []int{0}},
		{"node1", netip.MustParseAddr("10.77.0.2"), []int{1}},
		{"node2", netip.MustParseAddr("10.77.0.3"), []int{0}},
	}
	if !reflect.DeepEqual(p.hosts, want) || p.prefix != DefaultSubnet || p.rate != 100*Mbit {
		t.Fatalf("plan = %+v", p)
	}
	p, err = plan(Config{Hosts: 2, Name: "gpu-box-", Subnet: netip.MustParsePrefix("192.168.9.77/29"), CPUsPerHost: -1}, []int{0}, 77)
	if err != nil {
		t.Fatal(err)
	}
	if p.hosts[1].name != "gpu-box-1" || p.hosts[1].addr != netip.MustParseAddr("192.168.9.74") || p.prefix.String() != "192.168.9.72/29" || p.hosts[0].cpus != nil {
		t.Fatalf("plan = %+v", p)
	}
	for _, bad := range []Config{
		{Hosts: 0},
		{Hosts: 2, Name: "Node"},
		{Hosts: 2, Name: "n_"},
		{Hosts: 2, Name: strings.Repeat("a", 63)},
		{Hosts: 7, Subnet: netip.MustParsePrefix("10.0.0.0/29")},
		{Hosts: 1, Subnet: netip.MustParsePrefix("fd00::/64")},
		{Hosts: 1, Rate: -1},
		{Hosts: 3},
	} {
		if _, err := plan(bad, []int{0, 1}, 77); err == nil {
			t.Errorf("plan(%+v) made a plan", bad)
		}
	}
	if _, err := plan(Config{Hosts: 6, Subnet: netip.MustParsePrefix("10.0.0.0/29"), CPUsPerHost: -1}, nil, 77); err != nil {
		t.Errorf("a /29 holds 6 hosts: %v", err)
	}
}

func TestScripts(t *testing.T) {
	p, err := plan(Config{Hosts: 2, Rate: 100 * Mbit}, []int{0, 1}, 77)
	if err != nil {
		t.Fatal(err)
	}
	sw := switchScript(p, []int{101, 102})
	for _, want := range []string{
		"set -e\n",
		"ip link add br0 type bridge\n",
		"ip link add p0 type veth peer name eth0 netns 101\n",
		"ip link set p1 master br0\n",
		"ip link set dev p1 gso_max_size 16384 && tc qdisc replace dev p1 root tbf rate 100mbit burst 16384 latency 50ms peakrate 105000000bit mtu 18192 || exit 1\n",
	} {
		if !strings.Contains(sw, want) {
			t.Errorf("switch script lacks %q:\n%s", want, sw)
		}
	}
	h := hostScript(p, 1, "/tmp/it's/hosts", []string{"/run/netns/x y"})
	for _, want := range []string{
		"set -e\n",
		"umount -l '/run/netns/x y' 2>/dev/null || true\n",
		"echo node1 > /proc/sys/kernel/hostname\n",
		"mount -t tmpfs -o mode=1777 clustertest-shm-77 /dev/shm\n",
		`mount --bind '/tmp/it'\''s/hosts' /etc/hosts` + "\n",
		"ip addr add 10.77.0.2/24 dev eth0\n",
		"ip link set dev eth0 gso_max_size 16384 && tc qdisc replace dev eth0 root tbf rate 100mbit",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("host script lacks %q:\n%s", want, h)
		}
	}
	// Unshaped: no qdisc made; SetRate(0) deletes one if there is one.
	p.rate = 0
	if s := switchScript(p, []int{1, 2}) + hostScript(p, 0, "/h", nil); strings.Contains(s, "tc ") {
		t.Errorf("an unshaped cluster's scripts run tc:\n%s", s)
	}
	if got := shapeLine("eth0", 0); got != "ip link set dev eth0 gso_max_size 65536 || exit 1; tc qdisc del dev eth0 root 2>/dev/null || true" {
		t.Errorf("shapeLine(0) = %q", got)
	}
	// The burst is never below a few frames, and grows with the rate.
	if got := tbf(Mbit); !strings.Contains(got, "burst 16384 ") {
		t.Errorf("tbf(1mbit) = %q", got)
	}
	if got := tbf(10 * Gbit); !strings.Contains(got, "burst 1250000 ") || strings.Contains(got, "peakrate") {
		t.Errorf("tbf(10gbit) = %q, want a burst of 1 ms and no pacing", got)
	}
	// Up to 1 Gbit/s packets are paced at 5% over the rate, and made small.
	if got := tbf(Gbit); !strings.HasSuffix(got, " peakrate 1050000000bit mtu 18192") {
		t.Errorf("tbf(1gbit) = %q", got)
	}
	if got := shapeLine("eth0", 10*Gbit); !strings.HasPrefix(got, "ip link set dev eth0 gso_max_size 65536 && ") {
		t.Errorf("shapeLine(10gbit) = %q", got)
	}
	if got, want := hostsFile(p), "127.0.0.1\tlocalhost\n::1\tlocalhost\n10.77.0.1\tnode0\n10.77.0.2\tnode1\n"; got != want {
		t.Errorf("hosts file = %q, want %q", got, want)
	}
}

func TestArgv(t *testing.T) {
	got := enterArgs(42, []int{0, 3}, "prog", "-x", "a b")
	want := []string{"nsenter", "--target", "42", "--net", "--mount", "--uts", "--wd=.", "--", "taskset", "--cpu-list", "0,3", "prog", "-x", "a b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("enterArgs = %q, want %q", got, want)
	}
	if got := enterArgs(42, nil, "prog"); slices.Contains(got, "taskset") {
		t.Errorf("unpinned, enterArgs = %q", got)
	}
	if got := holderArgs(true); !reflect.DeepEqual(got[:7], []string{"unshare", "--net", "--mount", "--uts", "--propagation", "slave", "--"}) {
		t.Errorf("holderArgs(host) = %q", got)
	}
	if got := holderArgs(false); !reflect.DeepEqual(got[:3], []string{"unshare", "--net", "--"}) {
		t.Errorf("holderArgs(switch) = %q", got)
	}
}

func TestNsfsMounts(t *testing.T) {
	mi := `22 26 0:21 / /sys rw,relatime - sysfs sysfs rw
301 29 0:4 net:[4026532301] /run/netns/a rw shared:5 - nsfs nsfs rw
302 29 0:4 net:[4026532302] /run/netns/with\040space rw - nsfs nsfs rw
24 23 0:22 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683620k
garbage`
	if got, want := nsfsMounts(mi), []string{"/run/netns/a", "/run/netns/with space"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nsfsMounts = %q, want %q", got, want)
	}
	host := mi + "\n40 24 0:39 / /dev/shm rw,relatime - tmpfs clustertest-shm-1234 rw,mode=1777"
	if pid, ok := strayOf(host); !ok || pid != 1234 {
		t.Errorf("strayOf a host's process = %d, %v; want 1234", pid, ok)
	}
	if pid, ok := strayOf(mi); ok {
		t.Errorf("strayOf a process on no host = %d", pid)
	}
	if got := unescapeMount(`a\134b\04`); got != `a\b\04` {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestRshAgentScript(t *testing.T) {
	p, err := plan(Config{Hosts: 2}, []int{0, 1}, 77)
	if err != nil {
		t.Fatal(err)
	}
	s := rshAgentScript(p.hosts, func(i int) []string { return enterArgs(100+i, p.hosts[i].cpus) })
	for _, want := range []string{
		"#!/bin/sh\n",
		`node1|10.77.0.2) exec 'nsenter' '--target' '101' '--net' '--mount' '--uts' '--wd=.' '--' 'taskset' '--cpu-list' '1' /bin/sh -c "$*" ;;` + "\n",
		"exit 255\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the agent lacks %q:\n%s", want, s)
		}
	}
}
