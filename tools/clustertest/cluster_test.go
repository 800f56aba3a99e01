package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes this test binary a helper program (TestMain) that the
// tests run on hosts: its value names what it does.
const helperEnv = "CLUSTERTEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if err := helper(mode, os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// helper is the program the tests run on hosts:
//
//	listen PORT: serves TCP on PORT, printing "listening" once it does;
//	  a connection's first line is "hello" (answered with the hostname)
//	  or "sink" (the bytes that follow are counted until EOF, and
//	  answered with "BYTES n NANOS d", from the first byte to EOF).
//	dial ADDR hello: prints the answer.
//	dial ADDR sink DURATION: sends for DURATION, prints the answer.
//	dial ADDR burst BYTES: "spinsink" (a sink that times the bytes by
//	  the kernel's receive stamps of their packets, from the first to the
//	  last, not by when its reader ran), then after 200 ms (a shaper's
//	  bucket fills) BYTES in one write; prints the answer.
//	cluster: makes a cluster of 2 hosts, starts sleep on host 1, prints
//	  "READY <sleep's pid> <the cluster's directory> <its namespaces>"
//	  and waits to be killed.
func helper(mode string, args []string) error {
	switch mode {
	case "cluster":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := New(ctx, Config{Hosts: 2, ShareCPUs: true})
		if err != nil {
			return err
		}
		sl := c.Command(context.Background(), 1, "sleep", "600")
		if err := sl.Start(); err != nil {
			return err
		}
		ns := nsOf(c)
		for !slices.Contains(procsIn(ns), sl.Process.Pid) {
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Println("READY", sl.Process.Pid, c.dir, strings.Join(slices.Sorted(maps.Keys(ns)), ","))
		select {}
	case "listen":
		l, err := net.Listen("tcp", ":"+args[0])
		if err != nil {
			return err
		}
		fmt.Println("listening")
		for {
			c, err := l.Accept()
			if err != nil {
				return err
			}
			go serve(c)
		}
	case "dial":
		c, err := net.DialTimeout("tcp", args[0], 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		first := args[1]
		if first == "burst" {
			first = "spinsink"
		}
		if _, err := fmt.Fprintf(c, "%s\n", first); err != nil {
			return err
		}
		if args[1] == "burst" {
			n, err := strconv.Atoi(args[2])
			if err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			if _, err := c.Write(make([]byte, n)); err != nil {
				return err
			}
			c.(*net.TCPConn).CloseWrite()
		}
		if args[1] == "sink" {
			d, err := time.ParseDuration(args[2])
			if err != nil {
				return err
			}
			buf := make([]byte, 256<<10)
			for end := time.Now().Add(d); time.Now().Before(end); {
				if _, err := c.Write(buf); err != nil {
					return err
				}
			}
			c.(*net.TCPConn).CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c)
		fmt.Print(string(b))
		return err
	}
	return fmt.Errorf("no mode %q", mode)
}

func serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 256<<10)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	switch strings.TrimSpace(line) {
	case "hello":
		name, _ := os.Hostname()
		fmt.Fprintf(c, "%s\n", name)
	case "sink":
		buf := make([]byte, 256<<10)
		var n int64
		var first time.Time
		for {
			k, err := r.Read(buf)
			if k > 0 && first.IsZero() {
				first = time.Now()
			}
			n += int64(k)
			if err != nil {
				break
			}
		}
		fmt.Fprintf(c, "BYTES %d NANOS %d\n", n, time.Since(first).Nanoseconds())
	case "spinsink":
		// The kernel stamps each packet as it arrives (SO_TIMESTAMPNS),
		// and a read of a TCP socket reports the stamp of the last packet
		// it took: reads of 4 KiB give the burst's arrival from the first
		// packet to the last whenever this reader runs. A reader's own
		// clock measured when it ran: on a busy machine one descheduled
		// for a millisecond found a paced burst all in, and saw 181 µs.
		n, first, last := int64(r.Buffered()), int64(0), int64(0)
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return
		}
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1) })
		if err != nil {
			fmt.Fprintf(c, "SO_TIMESTAMPNS: %v\n", err)
			return
		}
		buf, oob := make([]byte, 4<<10), make([]byte, 256)
		stamped := true
		rc.Read(func(fd uintptr) bool {
			for {
				k, oobn, _, _, err := syscall.Recvmsg(int(fd), buf, oob, 0)
				if k > 0 {
					n += int64(k)
					ts, ok := rxStamp(oob[:oobn])
					stamped = stamped && ok
					if first == 0 {
						first = ts
					}
					last = ts
				}
				switch {
				case k == 0 && err == nil, err != nil && err != syscall.EAGAIN && err != syscall.EINTR:
					return true // the end
				case err == syscall.EAGAIN:
					return false // wait for more
				}
			}
		})
		if !stamped {
			fmt.Fprintf(c, "a read without SCM_TIMESTAMPNS\n")
			return
		}
		fmt.Fprintf(c, "BYTES %d NANOS %d\n", n, last-first)
	}
}

// rxStamp is the receive time (ns) in a read's control messages.
func rxStamp(oob []byte) (int64, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec, nsec := int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return sec*1e9 + nsec, true
		}
	}
	return 0, false
}

// self is this test binary, the helper.
func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a command on host i and returns its stdout, failing t if it
// fails.
func run(ctx context.Context, t *testing.T, c *Cluster, i int, env []string, name string, args ...string) string {
	t.Helper()
	cmd := c.Command(ctx, i, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s on %s: %v: %s", strings.Join(append([]string{name}, args...), " "), c.Host(i).Name, err, errb.String())
	}
	return out.String()
}

// listen starts the helper's listener on host i, port, and returns when it
// listens; ctx's end (or t's) stops it.
func listen(ctx context.Context, t *testing.T, c *Cluster, i int, port string) {
	t.Helper()
	cmd := c.Command(ctx, i, self(t), port)
	cmd.Env = append(os.Environ(), helperEnv+"=listen")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("listener on %s: %q, %v", c.Host(i).Name, line, err)
	}
}

// dial runs the helper's dial on host i; it returns its output and error.
func dial(ctx context.Context, c *Cluster, i int, bin string, args ...string) (string, error) {
	cmd := c.Command(ctx, i, bin, args...)
	cmd.Env = append(os.Environ(), helperEnv+"=dial")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
	}
	return string(out), nil
}

// TestReach: hosts reach each other across the bridge, by address and by
// name, and reach nothing else: no address off their network (no route),
// and not the caller's loopback (127.0.0.1 is each host's own).
func TestReach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Start(t, Config{Hosts: 2, ShareCPUs: true})
	bin := self(t)
	listen(ctx, t, c, 1, "7000")
	for _, to := range []string{c.Host(1).Addr.String() + ":7000", "node1:7000"} {
		got, err := dial(ctx, c, 0, bin, to, "hello")
		if err != nil || got != "node1\n" {
			t.Errorf("node0 dialing %s: %q, %v", to, got, err)
		}
	}
	// A listener in the caller's namespace, on loopback.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, to := range []string{l.Addr().String(), "192.0.2.1:80", "10.77.1.1:7000"} {
		if got, err := dial(ctx, c, 0, bin, to, "hello"); err == nil {
			t.Errorf("node0 reached %s, outside its network: %q", to, got)
		} else if !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("node0 dialing %s: %v; want refused or unreachable at once", to, err)
		}
	}
	// The routes say so: the cluster's network and nothing else.
	if got := strings.TrimSpace(run(ctx, t, c, 0, nil, "ip", "-4", "route", "show")); strings.Contains(got, "\n") || !strings.HasPrefix(got, "10.77.0.0/24 dev eth0 ") {
		t.Errorf("node0's routes:\n%s", got)
	}
	// The caller's namespace is untouched: it has none of the addresses.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if strings.HasPrefix(a.String(), c.Host(0).Addr.String()+"/") {
			t.Errorf("the caller's namespace has %v", a)
		}
	}
}

// TestHostIdentity: each host has its own /dev/shm (another device,
// hence another godist host identity; a file made on one is not seen on
// the other), which every command on that host shares; its own hostname;
// and commands keep the directory they are started in.
func TestHostIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Start(t, Config{Hosts: 2, ShareCPUs: true})
	probe := fmt.Sprintf("/dev/shm/clustertest-probe-%d", os.Getpid())
	const show = `stat -c %d:%i /dev/shm; cat /proc/sys/kernel/hostname /proc/sys/kernel/random/boot_id; ls -A /dev/shm`
	var ids []string
	for i := range 2 {
		f := strings.Split(run(ctx, t, c, i, nil, "sh", "-c", show), "\n")
		if f[1] != c.Host(i).Name {
			t.Errorf("host %d's hostname is %q, not %q", i, f[1], c.Host(i).Name)
		}
		if f[3] != "" {
			t.Errorf("host %d's /dev/shm is not empty at first: %q", i, f[3:])
		}
		ids = append(ids, f[0]+" "+f[2])
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/shm", &st); err != nil {
		t.Fatal(err)
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	own := fmt.Sprintf("%d:%d %s", st.Dev, st.Ino, strings.TrimSpace(string(boot)))
	if ids[0] == ids[1] || ids[0] == own || ids[1] == own {
		t.Errorf("/dev/shm identities (device:inode boot id) not distinct: host 0 %s, host 1 %s, caller %s", ids[0], ids[1], own)
	}
	run(ctx, t, c, 0, nil, "sh", "-c", "echo here > "+probe)
	if got := run(ctx, t, c, 0, nil, "cat", probe); got != "here\n" {
		t.Errorf("a second command on host 0 reads %q from %s", got, probe)
	}
	if got := run(ctx, t, c, 1, nil, "sh", "-c", "test -e "+probe+" && echo seen || echo unseen"); got != "unseen\n" {
		t.Errorf("host 1 sees host 0's %s", probe)
	}
	if _, err := os.Stat(probe); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the caller sees host 0's %s: %v", probe, err)
	}
	dir := t.TempDir()
	cmd := c.Command(ctx, 1, "pwd")
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil || string(out) != dir+"\n" {
		t.Errorf("pwd with Dir %s: %q, %v", dir, out, err)
	}
}

// TestAffinity: each host's commands run on its CPUs.
func TestAffinity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := Start(t, Config{Hosts: 2, CPUsPerHost: 1, ShareCPUs: true})
	for i, h := range c.Hosts() {
		got := run(ctx, t, c, i, nil, "grep", "Cpus_allowed_list", "/proc/self/status")
		if want := "Cpus_allowed_list:\t" + cpuList(h.CPUs) + "\n"; got != want {
			t.Errorf("host %d: %q, want %q", i, got, want)
		}
	}
	if all, _ := allowedCPUs(); len(all) >= 2 && slices.Equal(c.Host(0).CPUs, c.Host(1).CPUs) {
		t.Errorf("with %d CPUs, both hosts have %v", len(all), c.Host(0).CPUs)
	}
}

// TestRate: a TCP transfer from host 0 to host 1 runs at the rate the
// links are shaped to, within ±25%: 100 Mbit/s as made, 40 Mbit/s after
// SetRate, and faster than either unshaped.
func TestRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measures transfers for seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := Start(t, Config{Hosts: 2, Rate: 100 * Mbit, ShareCPUs: true})
	bin := self(t)
	listen(ctx, t, c, 1, "7000")
	to := c.Host(1).Addr.String() + ":7000"
	measure := func() float64 {
		t.Helper()
		out, err := dial(ctx, c, 0, bin, to, "sink", "2s")
		if err != nil {
			t.Fatal(err)
		}
		var n, ns int64
		if _, err := fmt.Sscanf(out, "BYTES %d NANOS %d", &n, &ns); err != nil || ns <= 0 {
			t.Fatalf("sink said %q: %v", out, err)
		}
		return float64(n) * 8 / (float64(ns) / 1e9)
	}
	check := func(rate BitRate) {
		t.Helper()
		got := measure()
		t.Logf("shaped to %v: %.1f Mbit/s of TCP payload (%.2f of the rate)", rate, got/1e6, got/float64(rate))
		if r := got / float64(rate); r < 0.75 || r > 1.25 {
			t.Errorf("shaped to %v, the transfer ran at %.1f Mbit/s", rate, got/1e6)
		}
	}
	check(100 * Mbit)
	if err := c.SetRate(ctx, 0, 40*Mbit); err != nil {
		t.Fatal(err)
	}
	check(40 * Mbit)
	// At 1 Gbit/s a burst after a quiet spell goes at the rate too, as
	// from a NIC, not at once from the bucket tbf filled meanwhile.
	for i := range 2 {
		if err := c.SetRate(ctx, i, Gbit); err != nil {
			t.Fatal(err)
		}
	}
	if l := run(ctx, t, c, 0, nil, "ip", "-d", "link", "show", "dev", "eth0"); !strings.Contains(l, "gso_max_size 16384 ") {
		t.Errorf("at 1 Gbit/s, eth0 makes packets of more than 16 KiB:\n%s", l)
	}
	// TCP would restart a connection quiet for longer than its
	// retransmission timeout at its initial window, and take round trips
	// to send the burst whatever the link: at once it shows the shaper.
	// (/proc/sys/net is the namespace's; sysctl(8), from procps, may be
	// missing where /bin/sh is not.)
	run(ctx, t, c, 0, nil, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/tcp_slow_start_after_idle")
	const burst = 128 << 10
	out, err := dial(ctx, c, 0, bin, to, "burst", strconv.Itoa(burst))
	var n, ns int64
	if _, serr := fmt.Sscanf(out, "BYTES %d NANOS %d", &n, &ns); err != nil || serr != nil || n != burst {
		t.Fatalf("sink said %q: %v, %v", out, err, serr)
	}
	wire := time.Duration(float64(burst*8) / float64(Gbit) * 1e9)
	t.Logf("a burst of %d bytes after a quiet spell at 1 Gbit/s: %v from its first byte in to its last (%v on the wire)", burst, time.Duration(ns), wire)
	// By the kernel's stamps, paced: 0.92-1.13 of the wire's time (3.0 on
	// a machine busy with two CPU hogs); unpaced: 0.38-0.47.
	if time.Duration(ns) < wire*3/4 {
		t.Errorf("a burst of %d bytes came in over %v at 1 Gbit/s, where the wire takes %v: not paced", burst, time.Duration(ns), wire)
	}
	for i := range 2 {
		if err := c.SetRate(ctx, i, 0); err != nil {
			t.Fatal(err)
		}
	}
	got := measure()
	t.Logf("unshaped: %.1f Mbit/s", got/1e6)
	if got < 150e6 {
		t.Errorf("unshaped, the transfer ran at %.1f Mbit/s, no faster than shaped", got/1e6)
	}
	if q := run(ctx, t, c, 0, nil, "tc", "qdisc", "show", "dev", "eth0"); strings.Contains(q, "tbf") {
		t.Errorf("unshaped, eth0 still has %s", q)
	}
}

// gone checks that nothing of a closed cluster is left: no process in
// its namespaces (so the namespaces, and the links, qdiscs and mounts in
// them, are gone), no /run/netns name for them, no link of theirs or
// /dev/shm of theirs in the caller's namespaces, no files.
func gone(t *testing.T, ns map[string]bool, dir string, linksBefore map[string]bool) {
	t.Helper()
	if left := procsIn(ns); len(left) > 0 {
		t.Errorf("processes %v are still in the cluster's namespaces", left)
	}
	names, _ := filepath.Glob("/run/netns/*")
	for _, n := range names {
		var st syscall.Stat_t
		if syscall.Stat(n, &st) == nil && ns["net:["+strconv.FormatUint(st.Ino, 10)+"]"] {
			t.Errorf("%s is one of the cluster's namespaces", n)
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		t.Logf("ip netns list: %q", out)
	}
	for l := range rootLinks(t) {
		if !linksBefore[l] && (l == bridgeDev || strings.HasPrefix(l, "p") || l == hostDev) {
			t.Errorf("the caller's namespace has a link %s it did not have before", l)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(b), shmPrefix) {
		t.Errorf("the caller's mounts include a host's /dev/shm (%v)", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cluster's directory %s is still there: %v", dir, err)
	}
}

// rootLinks lists the links of the caller's network namespace.
func rootLinks(t *testing.T) map[string]bool {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, i := range ifs {
		out[i.Name] = true
	}
	return out
}

// nsOf returns the namespaces of a cluster's holders.
func nsOf(c *Cluster) map[string]bool {
	out := map[string]bool{}
	for _, h := range append([]*holder{c.sw}, c.holders...) {
		if h != nil {
			for _, l := range h.ns {
				out[l] = true
			}
		}
	}
	return out
}

// TestClose: Close kills what runs on the hosts and leaves nothing
// behind; so does a New that fails half way.
func TestClose(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := rootLinks(t)
	c, err := New(ctx, Config{Hosts: 2, Rate: 50 * Mbit, ShareCPUs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns, dir := nsOf(c), c.dir
	if len(ns) != 7 {
		t.Errorf("namespaces %v: want 7 (the switch's network, and 3 for each host)", ns)
	}
	sleeper := c.Command(ctx, 1, "sleep", "600")
	sleeper.Stderr = os.Stderr
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	// Close kills what has entered a host; wait until it has.
	for !slices.Contains(procsIn(ns), sleeper.Process.Pid) {
		if ctx.Err() != nil {
			t.Fatal("the command never entered host 1")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// One started just before Close, perhaps not yet in host 0: it must
	// not outlive the cluster either (Close kills the nsenter about to
	// enter, or nsenter finds no host to enter).
	late := c.Command(ctx, 0, "sleep", "600")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %v", time.Since(start))
	if err := sleeper.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("a command still running on a host when the cluster closed: %v, want killed", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- late.Wait() }()
	select {
	case err := <-waited:
		t.Logf("the command started just before Close: %v", err)
	case <-time.After(5 * time.Second):
		t.Errorf("a command started just before Close still runs 5 s after it")
	}
	gone(t, ns, dir, before)
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if err := c.Command(ctx, 0, "true").Run(); !errors.Is(err, ErrClosed) {
		t.Errorf("a command after Close: %v, want ErrClosed", err)
	}
	if err := c.SetRate(ctx, 0, Mbit); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRate after Close: %v, want ErrClosed", err)
	}

	// A New that fails after making its first host.
	var half *Cluster
	testHook = func(c *Cluster, stage string) error {
		if stage == "node0" {
			half = c
			return errors.New("injected")
		}
		return nil
	}
	defer func() { testHook = nil }()
	if c, err := New(ctx, Config{Hosts: 2, ShareCPUs: true}); err == nil || c != nil || half == nil {
		t.Fatalf("New with a failure injected: %v, %v", c, err)
	}
	gone(t, nsOf(half), half.dir, before)
}

// TestCreatorKilled: when the process that made a cluster is SIGKILLed,
// the namespaces' holders end with it; what its commands started on the
// hosts lives on (as any exec.Cmd's process would) until Sweep (which New
// calls) kills it, and then nothing is left.
func TestCreatorKilled(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := rootLinks(t)
	cmd := exec.CommandContext(ctx, self(t))
	cmd.Env = append(os.Environ(), helperEnv+"=cluster")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 4 || f[0] != "READY" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the cluster's creator said %q, %v", line, err)
	}
	sleeper, _ := strconv.Atoi(f[1])
	dir, ns := f[2], map[string]bool{}
	for _, l := range strings.Split(f[3], ",") {
		ns[l] = true
	}
	cmd.Process.Kill()
	cmd.Wait()
	for !slices.Equal(procsIn(ns), []int{sleeper}) {
		if ctx.Err() != nil {
			t.Fatalf("processes in the namespaces of a cluster whose creator was killed: %v, want only the command %d", procsIn(ns), sleeper)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := Sweep(); err != nil {
		t.Fatal(err)
	}
	gone(t, ns, dir, before)
}
