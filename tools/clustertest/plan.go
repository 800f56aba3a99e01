package clustertest

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// This file holds the decisions: the address plan, the CPUs of each host,
// the shaping, and the scripts and command lines that carry them out. None
// of it runs anything; cluster.go runs what it returns.

// BitRate is a link's rate in bits per second; zero means unshaped.
type BitRate int64

// Rates in bits per second, as tc counts them (powers of 1000).
const (
	Kbit BitRate = 1000
	Mbit         = 1000 * Kbit
	Gbit         = 1000 * Mbit
)

// ParseBitRate reads a rate as tc writes it: a number of bits per second
// with an optional unit, bit, kbit, mbit, gbit or tbit ("100mbit",
// "1gbit", "2500000"). "0" is unshaped.
func ParseBitRate(s string) (BitRate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := BitRate(1)
	for _, u := range []struct {
		suffix string
		mult   BitRate
	}{{"tbit", 1000 * Gbit}, {"gbit", Gbit}, {"mbit", Mbit}, {"kbit", Kbit}, {"bit", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (n > 0 && BitRate(n) > (1<<62)/mult) {
		return 0, fmt.Errorf("clustertest: rate %q: want bits per second, such as 100mbit, 1gbit or 2500000", s)
	}
	return BitRate(n) * mult, nil
}

// String writes r as tc reads it, in the largest unit that divides it.
func (r BitRate) String() string {
	for _, u := range []struct {
		name string
		unit BitRate
	}{{"gbit", Gbit}, {"mbit", Mbit}, {"kbit", Kbit}} {
		if r != 0 && r%u.unit == 0 {
			return strconv.FormatInt(int64(r/u.unit), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(r), 10) + "bit"
}

// DefaultSubnet is the hosts' network unless Config.Subnet says otherwise.
// Every cluster has a bridge of its own in a namespace of its own, so two
// clusters with the same subnet do not meet.
var DefaultSubnet = netip.MustParsePrefix("10.77.0.0/24")

// DefaultName is the hosts' name prefix unless Config.Name says otherwise:
// node0, node1, ...
const DefaultName = "node"

// hostPlan is what New makes of one host.
type hostPlan struct {
	name string
	addr netip.Addr
	cpus []int // nil: not pinned
}

// clusterPlan is the whole of New's decisions but the process ids.
type clusterPlan struct {
	hosts   []hostPlan
	prefix  netip.Prefix
	rate    BitRate
	creator int // the pid of the process that makes it (shmSource)
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// plan decides the hosts' names, addresses and CPUs from cfg, given the
// CPUs this process may run on, for process creator.
func plan(cfg Config, allowed []int, creator int) (clusterPlan, error) {
	if cfg.Hosts < 1 {
		return clusterPlan{}, fmt.Errorf("clustertest: Config.Hosts is %d: want at least 1", cfg.Hosts)
	}
	if cfg.Rate < 0 {
		return clusterPlan{}, fmt.Errorf("clustertest: Config.Rate is %d: want bits per second, or 0 for unshaped", cfg.Rate)
	}
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	if !nameRE.MatchString(name) || len(name)+len(strconv.Itoa(cfg.Hosts-1)) > 63 {
		return clusterPlan{}, fmt.Errorf("clustertest: Config.Name %q: want a hostname prefix (lower-case letters, digits and dashes, starting with a letter)", name)
	}
	prefix := cfg.Subnet
	if !prefix.IsValid() {
		prefix = DefaultSubnet
	}
	addrs, err := hostAddrs(prefix, cfg.Hosts)
	if err != nil {
		return clusterPlan{}, err
	}
	cpus, err := assignCPUs(allowed, cfg.Hosts, cfg.CPUsPerHost, cfg.ShareCPUs)
	if err != nil {
		return clusterPlan{}, err
	}
	p := clusterPlan{prefix: prefix.Masked(), rate: cfg.Rate, creator: creator}
	for i := range cfg.Hosts {
		p.hosts = append(p.hosts, hostPlan{name: name + strconv.Itoa(i), addr: addrs[i], cpus: cpus[i]})
	}
	return p, nil
}

// hostAddrs gives host i the (i+1)th address of prefix, an IPv4 network
// with room for n hosts (its network and broadcast addresses unused).
func hostAddrs(prefix netip.Prefix, n int) ([]netip.Addr, error) {
	if !prefix.Addr().Is4() {
		return nil, fmt.Errorf("clustertest: subnet %v: want an IPv4 network", prefix)
	}
	if room := 1<<(32-prefix.Bits()) - 2; n > room {
		return nil, fmt.Errorf("clustertest: subnet %v holds %d hosts, not %d: give Config.Subnet a shorter prefix", prefix, max(room, 0), n)
	}
	a := prefix.Masked().Addr()
	out := make([]netip.Addr, n)
	for i := range out {
		a = a.Next()
		out[i] = a
	}
	return out, nil
}

// ErrTooFewCPUs is New's error when the hosts would have to share CPUs and
// Config.ShareCPUs does not allow it.
var ErrTooFewCPUs = errors.New("clustertest: too few CPUs for hosts of their own")

// assignCPUs gives each of hosts hosts perHost CPUs of allowed (the CPUs
// this process may use, ascending), in order: host 0 the first perHost,
// host 1 the next, and so on. perHost 0 means as many as each host can
// have alone (len(allowed)/hosts, at least 1); negative means no pinning
// (every host runs anywhere: nil for each). When the hosts need more CPUs
// than there are, they wrap around and share, if share; else
// ErrTooFewCPUs.
func assignCPUs(allowed []int, hosts, perHost int, share bool) ([][]int, error) {
	out := make([][]int, hosts)
	if perHost < 0 {
		return out, nil
	}
	if len(allowed) == 0 {
		return nil, errors.New("clustertest: this process may run on no CPU")
	}
	if perHost == 0 {
		perHost = max(len(allowed)/hosts, 1)
	}
	if perHost > len(allowed) {
		return nil, fmt.Errorf("%w: Config.CPUsPerHost is %d but this process may run on %d", ErrTooFewCPUs, perHost, len(allowed))
	}
	if hosts*perHost > len(allowed) && !share {
		return nil, fmt.Errorf("%w: %d hosts × %d CPUs, but this process may run on %d (%s): set Config.ShareCPUs to let hosts share them",
			ErrTooFewCPUs, hosts, perHost, len(allowed), cpuList(allowed))
	}
	for h := range out {
		for k := range perHost {
			out[h] = append(out[h], allowed[(h*perHost+k)%len(allowed)])
		}
	}
	return out, nil
}

// cpuList writes CPUs as taskset -c reads them: 0,1,4.
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// tbf is the qdisc that shapes a link end to rate: a token bucket whose
// burst is 1 ms of traffic (at least 16 KiB, so that a full-size frame and
// then some always fits) and whose queue holds 50 ms more. A NIC of that
// rate never sends faster, but a bucket that has filled while the link
// was quiet lets its burst through at the veth's speed: a burst of 4 ms
// let a 64 KiB message through twice as fast as the link, and even 1 ms
// (125 KB at 1 Gbit/s) let most of one through between two calls of a
// benchmark (an all-reduce of 64 KiB across 2 hosts took 480 µs where its
// bytes take 524 on the wire; issue 28). So at rates up to peakMax a
// second bucket of one packet, refilled at 5% over the rate (tbf's
// peakrate), paces the packets as a NIC does, and the link ends make
// packets of at most peakGSO bytes (gso_max_size; the veth's 64 KiB ones
// would pass whole): 64 KiB then takes about its time on the wire, and
// transfers still run at 90-98% of the rate (90 where 4 hosts share 2
// CPUs). Each packet costs the shaper a timer: with 8 KiB packets the 4
// hosts on 2 CPUs moved 82% of the rate and their large all-reduces 64%
// of the bound; with 32 KiB a 64 KiB all-reduce across 2 hosts still
// took 475 µs, under its bytes' time on the wire. Above
// peakMax the packets' count would cost the lab's CPUs more than the
// shaper saves (a 10 Gbit/s all-reduce of 16 MiB took 56-94 ms with
// packets of 8-16 KiB against 32 with 64 KiB), and the CPUs, not the
// burst, bound it there.
func tbf(rate BitRate) string {
	burst := max(int64(rate)/8/1000, 16<<10)
	if rate <= peakMax {
		return fmt.Sprintf("tbf rate %s burst %d latency 50ms peakrate %dbit mtu %d", rate, burst, int64(rate)/20*21, peakGSO+peakHeaders)
	}
	return fmt.Sprintf("tbf rate %s burst %d latency 50ms", rate, burst)
}

// Pacing (see tbf): the highest rate paced packet by packet, the largest
// packet the link ends make there, and room for a packet's headers.
const (
	peakMax     = Gbit
	peakGSO     = 16 << 10
	peakHeaders = 1808
)

// shapeLine is the command that sets dev's rate: its root qdisc replaced
// with tbf, or, unshaped, deleted (and no error if it had none), and its
// largest packet (see tbf). It exits the shell when a step fails (set -e
// does not stop at the first command of an && list).
func shapeLine(dev string, rate BitRate) string {
	gso := "ip link set dev " + dev + " gso_max_size "
	if rate > 0 {
		size := 64 << 10
		if rate <= peakMax {
			size = peakGSO
		}
		return gso + strconv.Itoa(size) + " && tc qdisc replace dev " + dev + " root " + tbf(rate) + " || exit 1"
	}
	return gso + "65536 || exit 1; tc qdisc del dev " + dev + " root 2>/dev/null || true"
}

// The interfaces' names. Each lives in a namespace of the cluster's own,
// so no name is shared with anything outside it.
const (
	bridgeDev = "br0"  // the switch's bridge
	hostDev   = "eth0" // a host's end of its link
)

// portDev is the switch's end of host i's link.
func portDev(i int) string { return "p" + strconv.Itoa(i) }

// switchScript is the sh script, run in the switch's network namespace,
// that makes the bridge and every link: a veth pair per host with its
// host end moved into the namespace of process pids[i] (host i's holder)
// as eth0, and its switch end on the bridge, shaped to p.rate.
func switchScript(p clusterPlan, pids []int) string {
	var b strings.Builder
	b.WriteString("set -e\nip link set lo up\n")
	fmt.Fprintf(&b, "ip link add %s type bridge\nip link set %s up\n", bridgeDev, bridgeDev)
	for i := range p.hosts {
		dev := portDev(i)
		fmt.Fprintf(&b, "ip link add %s type veth peer name %s netns %d\n", dev, hostDev, pids[i])
		fmt.Fprintf(&b, "ip link set %s master %s\nip link set %s up\n", dev, bridgeDev, dev)
		if p.rate > 0 {
			b.WriteString(shapeLine(dev, p.rate) + "\n")
		}
	}
	return b.String()
}

// hostScript is the sh script, run in host i's network, mount and UTS
// namespaces, that makes it a host: its hostname, its own tmpfs on
// /dev/shm, hostsFile bound on /etc/hosts, its address on eth0 shaped to
// p.rate, and none of the namespace mounts (detach) that its mount
// namespace copied from the caller's (so that it does not keep other
// programs' namespaces alive).
func hostScript(p clusterPlan, i int, hostsFile string, detach []string) string {
	h := p.hosts[i]
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, m := range detach {
		fmt.Fprintf(&b, "umount -l %s 2>/dev/null || true\n", shellQuote(m))
	}
	fmt.Fprintf(&b, "echo %s > /proc/sys/kernel/hostname\n", h.name)
	b.WriteString("mount -t tmpfs -o mode=1777 " + shmSource(p.creator) + " /dev/shm\n")
	fmt.Fprintf(&b, "mount --bind %s /etc/hosts\n", shellQuote(hostsFile))
	b.WriteString("ip link set lo up\n")
	fmt.Fprintf(&b, "ip addr add %s dev %s\nip link set %s up\n", netip.PrefixFrom(h.addr, p.prefix.Bits()), hostDev, hostDev)
	if p.rate > 0 {
		b.WriteString(shapeLine(hostDev, p.rate) + "\n")
	}
	return b.String()
}

// shmSource names the /dev/shm mounts of the hosts that process creator
// makes (in /proc/mounts), so that a process left on a host when its
// creator died can be told (strayOf).
func shmSource(creator int) string { return shmPrefix + strconv.Itoa(creator) }

const shmPrefix = "clustertest-shm-"

// strayOf reads a process's /proc/PID/mountinfo: if it runs on a host (its
// /dev/shm is a host's), it returns the pid of the host's creator.
func strayOf(mountinfo string) (creator int, ok bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, found := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !found || len(f) < 5 || len(g) < 2 || f[4] != "/dev/shm" || g[0] != "tmpfs" || !strings.HasPrefix(g[1], shmPrefix) {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(g[1], shmPrefix)); err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}

// hostsFile is every host's /etc/hosts: localhost and the cluster's hosts
// by name.
func hostsFile(p clusterPlan) string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
	for _, h := range p.hosts {
		fmt.Fprintf(&b, "%s\t%s\n", h.addr, h.name)
	}
	return b.String()
}

// enterArgs is the command line that runs argv in host pid's namespaces
// (the holder's) pinned to cpus (none: not pinned), in the directory
// nsenter was started in (--wd=. opens it before entering the mount
// namespace, so exec.Cmd.Dir keeps its meaning).
func enterArgs(pid int, cpus []int, argv ...string) []string {
	out := []string{"nsenter", "--target", strconv.Itoa(pid), "--net", "--mount", "--uts", "--wd=.", "--"}
	if len(cpus) > 0 {
		out = append(out, "taskset", "--cpu-list", cpuList(cpus))
	}
	return append(out, argv...)
}

// holderArgs is the command line of a namespace holder: it makes the
// namespaces (the switch's: a network namespace; a host's: network,
// mount and UTS, the mounts slaves of the caller's so that unmounts there
// reach it), says "ready" on stdout, and then lives until its stdin ends,
// which is when the cluster closes it or its creator dies.
func holderArgs(host bool) []string {
	args := []string{"unshare", "--net"}
	if host {
		args = append(args, "--mount", "--uts", "--propagation", "slave")
	}
	return append(args, "--", "sh", "-c", "echo ready; exec cat >/dev/null")
}

// nsfsMounts returns the mount points of namespace files (nsfs) in a
// /proc/PID/mountinfo: those of `ip netns add` under /run/netns, say.
func nsfsMounts(mountinfo string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "nsfs" {
			continue
		}
		out = append(out, unescapeMount(f[4]))
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// rshAgentScript is an OpenMPI plm_rsh_agent (or any "ssh HOST COMMAND"
// caller's ssh): it runs COMMAND, a shell command line as ssh would hand
// it to the remote shell, on HOST, named or by address, through argv,
// the command line that runs a program on a host (enterArgs, without the
// program). Leading options (ssh's -x, say) are skipped.
func rshAgentScript(hosts []hostPlan, argv func(i int) []string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("# An rsh agent for a clustertest cluster: AGENT [-opts] HOST COMMAND... runs\n")
	b.WriteString("# COMMAND (a shell command line, as with ssh) on HOST, named or by address.\n")
	b.WriteString("while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n")
	b.WriteString("host=$1\nshift\ncase \"$host\" in\n")
	var names []string
	for i, h := range hosts {
		names = append(names, h.name)
		q := make([]string, 0, 8)
		for _, a := range argv(i) {
			q = append(q, shellQuote(a))
		}
		fmt.Fprintf(&b, "%s|%s) exec %s /bin/sh -c \"$*\" ;;\n", h.name, h.addr, strings.Join(q, " "))
	}
	fmt.Fprintf(&b, "esac\necho \"$0: no host $host in this cluster (%s)\" >&2\nexit 255\n", strings.Join(names, " "))
	return b.String()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
