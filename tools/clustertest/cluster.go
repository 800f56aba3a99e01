package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Config describes a cluster.
type Config struct {
	// Hosts is the number of hosts, at least 1.
	Hosts int
	// Name is the hosts' name prefix: host i is Name+i (DefaultName,
	// "node", when empty), its hostname and its name in every host's
	// /etc/hosts.
	Name string
	// Subnet is the hosts' IPv4 network; host i has its (i+1)th address.
	// The zero value is DefaultSubnet, 10.77.0.0/24.
	Subnet netip.Prefix
	// Rate shapes every link, both ways, with tbf; zero leaves them
	// unshaped. SetRate changes one host's.
	Rate BitRate
	// CPUsPerHost is how many CPUs each host is pinned to: 0 for as many
	// as each can have to itself (the CPUs this process may use divided
	// among the hosts, at least 1), negative for no pinning.
	CPUsPerHost int
	// ShareCPUs lets hosts share CPUs (round robin) when there are fewer
	// than Hosts × CPUsPerHost; without it New fails with ErrTooFewCPUs.
	// Hosts of a real cluster do not share CPUs: a measurement on a
	// cluster that shares them says so.
	ShareCPUs bool
}

// Host is one host of a cluster.
type Host struct {
	Name string     // its hostname, and its name in the hosts' /etc/hosts
	Addr netip.Addr // its address on the cluster's network
	CPUs []int      // the CPUs its commands are pinned to; nil: not pinned
	// PID is the process that holds its namespaces: nsenter --target PID
	// --net --mount --uts enters it (Argv gives the whole command line).
	PID int
}

// Cluster is a set of hosts on this machine. Its methods may be called
// from several goroutines.
type Cluster struct {
	plan  clusterPlan
	hosts []Host
	dir   string // hosts file and scripts; removed by Close

	sw      *holder   // the switch's network namespace
	holders []*holder // the hosts'

	agentOnce sync.Once
	agent     string // RshAgent's script
	agentErr  error

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// ErrUnavailable is Available's (and New's) error kind when this process
// cannot make hosts: not root, a tool missing, or namespaces refused.
var ErrUnavailable = errors.New("clustertest: cannot make hosts here")

// ErrClosed is the error of a command started after Close.
var ErrClosed = errors.New("clustertest: cluster closed")

// tools are the programs New and Command run.
var tools = []string{"ip", "tc", "nsenter", "unshare", "taskset", "mount", "umount", "sh", "cat"}

// Available says whether this process can make clusters: nil, or an
// ErrUnavailable that says what is missing.
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: it needs Linux namespaces, and this is %s", ErrUnavailable, runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it needs root (network, mount and UTS namespaces, tc), and this is uid %d; CI runs as root", ErrUnavailable, os.Geteuid())
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found: install iproute2 (ip, tc) and util-linux (nsenter, unshare, taskset, mount)", ErrUnavailable, strings.Join(missing, ", "))
	}
	return canUnshare()
}

// canUnshare tries, once, to make the namespaces a host needs: root in a
// container without CAP_SYS_ADMIN cannot.
var canUnshare = sync.OnceValue(func() error {
	args := holderArgs(true)
	args = append(args[:slices.Index(args, "--")], "--", "true")
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s: %v: %s (a container without CAP_SYS_ADMIN?)", ErrUnavailable, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
})

// Start is New for a test: it skips t when Available says no, fails it
// when New fails (within a minute), and closes the cluster when t ends,
// failing t if anything is left behind.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// New makes the cluster cfg describes: a network namespace holding a
// bridge (the switch), and for each host network, mount and UTS
// namespaces with its hostname, its own tmpfs on /dev/shm, /etc/hosts
// naming every host, and a veth link to the bridge shaped to cfg.Rate.
// Nothing is added to the caller's namespaces. ctx bounds the making;
// the cluster lives until Close (or until this process dies: each
// namespace is held by a process that ends with it). When New fails it
// has removed whatever it made. It first sweeps up after clusters whose
// creators died (Sweep).
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, fmt.Errorf("clustertest: the CPUs this process may use: %w", err)
	}
	p, err := plan(cfg, allowed, os.Getpid())
	if err != nil {
		return nil, err
	}
	c := &Cluster{plan: p}
	if err := c.start(ctx); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	Sweep() // tidiness: a stale cluster is isolated from this one anyway
	dir, err := os.MkdirTemp("", dirPrefix(os.Getpid()))
	if err != nil {
		return fmt.Errorf("clustertest: %w", err)
	}
	c.dir = dir
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte(hostsFile(c.plan)), 0o644); err != nil {
		return fmt.Errorf("clustertest: %w", err)
	}
	if c.sw, err = startHolder(ctx, false); err != nil {
		return fmt.Errorf("clustertest: the switch: %w", err)
	}
	pids := make([]int, len(c.plan.hosts))
	for i, h := range c.plan.hosts {
		hd, err := startHolder(ctx, true)
		if err != nil {
			return fmt.Errorf("clustertest: host %s: %w", h.name, err)
		}
		c.holders = append(c.holders, hd)
		pids[i] = hd.pid()
	}
	if err := nsSh(ctx, c.sw.pid(), []string{"--net"}, switchScript(c.plan, pids)); err != nil {
		return fmt.Errorf("clustertest: making the switch and links: %w", err)
	}
	if err := c.hook("links"); err != nil {
		return err
	}
	for i, h := range c.plan.hosts {
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pids[i]))
		if err != nil {
			return fmt.Errorf("clustertest: host %s: %w", h.name, err)
		}
		script := hostScript(c.plan, i, hosts, nsfsMounts(string(mi)))
		if err := nsSh(ctx, pids[i], []string{"--net", "--mount", "--uts"}, script); err != nil {
			return fmt.Errorf("clustertest: making host %s: %w", h.name, err)
		}
		c.hosts = append(c.hosts, Host{Name: h.name, Addr: h.addr, CPUs: slices.Clone(h.cpus), PID: pids[i]})
		if err := c.hook(h.name); err != nil {
			return err
		}
	}
	return nil
}

// testHook, when a test sets it, is called after each stage of New (the
// links made, then each host made, by name); its error fails New there.
var testHook func(c *Cluster, stage string) error

func (c *Cluster) hook(stage string) error {
	if testHook == nil {
		return nil
	}
	return testHook(c, stage)
}

// Hosts returns the hosts, host i at index i.
func (c *Cluster) Hosts() []Host {
	out := make([]Host, len(c.hosts))
	for i, h := range c.hosts {
		h.CPUs = slices.Clone(h.CPUs)
		out[i] = h
	}
	return out
}

// Host returns host i. It panics if there is no host i.
func (c *Cluster) Host(i int) Host {
	h := c.hosts[i]
	h.CPUs = slices.Clone(h.CPUs)
	return h
}

// Argv returns the command line that runs name with args on host i: in
// its network, mount and UTS namespaces, pinned to its CPUs, in the
// directory it is started in. Command runs it; a script that starts
// commands on hosts (an OpenMPI rsh agent, say) can too. It panics if
// there is no host i.
func (c *Cluster) Argv(i int, name string, args ...string) []string {
	return append(c.enter(i), append([]string{name}, args...)...)
}

// enter is the command line that runs a program on host i, without it.
func (c *Cluster) enter(i int) []string {
	h := c.hosts[i]
	return enterArgs(h.PID, h.CPUs)
}

// Command returns the exec.Cmd that runs name with args on host i (Argv):
// it sees host i's network, hostname, /dev/shm and /etc/hosts, runs on its
// CPUs, and otherwise sees this machine as the caller does (the same
// files, the same processes). cmd.Dir, Env and the standard streams mean
// what they always do; cmd.Args is the whole command line, starting with
// nsenter, and the process is the program itself once it runs (nsenter
// and taskset exec it), so ctx's end kills the program. Start it before
// Close: one made after Close fails with ErrClosed, one started during
// Close is killed or fails to enter its host, and one made before Close
// and started after it fails to (unless the holder's pid has been reused
// since, when it may run outside). It panics if there is no host i.
func (c *Cluster) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	argv := c.Argv(i, name, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if c.closed.Load() {
		cmd.Err = ErrClosed
	}
	return cmd
}

// RshAgent writes, once, and returns the path of a script that runs a
// command on a host as ssh would: AGENT HOST COMMAND..., HOST a host's
// name or address, COMMAND a shell command line. Give it to OpenMPI's
// mpirun as --mca plm_rsh_agent, with --host naming the hosts, and run
// mpirun itself on one of them (the hosts reach each other, not the
// caller): mpirun starts its daemons on the other hosts through it. The
// script lives until Close.
func (c *Cluster) RshAgent() (string, error) {
	c.agentOnce.Do(func() {
		if c.closed.Load() {
			c.agentErr = ErrClosed
			return
		}
		p := filepath.Join(c.dir, "rsh-agent")
		script := rshAgentScript(c.plan.hosts, c.enter)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			c.agentErr = fmt.Errorf("clustertest: %w", err)
			return
		}
		c.agent = p
	})
	return c.agent, c.agentErr
}

// SetRate shapes host i's link, both ways, to rate (0: unshaped). It
// panics if there is no host i.
func (c *Cluster) SetRate(ctx context.Context, i int, rate BitRate) error {
	h := c.hosts[i]
	if rate < 0 {
		return fmt.Errorf("clustertest: rate %d: want bits per second, or 0 for unshaped", rate)
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := nsSh(ctx, c.sw.pid(), []string{"--net"}, shapeLine(portDev(i), rate)); err != nil {
		return fmt.Errorf("clustertest: shaping the switch's port to %s: %w", h.Name, err)
	}
	if err := nsSh(ctx, h.PID, []string{"--net"}, shapeLine(hostDev, rate)); err != nil {
		return fmt.Errorf("clustertest: shaping %s's link: %w", h.Name, err)
	}
	return nil
}

// SetLink takes host i's link down at the switch (up false), as a pulled
// cable or a failed switch port does: its frames are dropped with no FIN
// and no RST, and its own end of the link stays up; or brings it back.
// It panics if there is no host i.
func (c *Cluster) SetLink(ctx context.Context, i int, up bool) error {
	h := c.hosts[i]
	if c.closed.Load() {
		return ErrClosed
	}
	state := "down"
	if up {
		state = "up"
	}
	if err := nsSh(ctx, c.sw.pid(), []string{"--net"}, "ip link set "+portDev(i)+" "+state); err != nil {
		return fmt.Errorf("clustertest: setting %s's link %s: %w", h.Name, state, err)
	}
	return nil
}

// Close removes the cluster: it kills every process still in its hosts
// (those its commands started), ends the processes that hold the
// namespaces (the namespaces go with them, and with them the links,
// qdiscs and mounts), and removes its files. It waits until no process
// is left in them, and says so if one is. It may be called more than
// once, and after a failed New.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	c.closed.Store(true)
	var errs []error
	ns := map[string]bool{}
	for _, h := range append([]*holder{c.sw}, c.holders...) {
		if h == nil {
			continue
		}
		for _, l := range h.ns {
			ns[l] = true
		}
		// Once its holder is gone, nothing new can enter a namespace
		// (nsenter opens /proc/PID/ns/...), and it lives only as long
		// as the processes in it and the nsenters about to enter it.
		if err := h.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killIn(ns, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("clustertest: %w", err))
		}
	}
	return errors.Join(errs...)
}

// holder is a process that holds namespaces (holderArgs).
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer     // read only after cmd.Wait
	ns     map[string]string // kind ("net", ...) → its link, "net:[4026532...]"
	waited chan struct{}     // closed when cmd.Wait has returned
}

func (h *holder) pid() int { return h.cmd.Process.Pid }

// startHolder starts a holder and waits until it is in namespaces of its
// own (it checks: whatever is run in them must never reach the caller's).
func startHolder(ctx context.Context, host bool) (*holder, error) {
	args := holderArgs(host)
	cmd := exec.Command(args[0], args[1:]...) // not ctx's: it outlives New
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &holder{cmd: cmd, stdin: stdin, stderr: new(bytes.Buffer), waited: make(chan struct{})}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	go func() { cmd.Wait(); close(h.waited) }()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("it said %q", line)
		}
		ready <- err
	}()
	fail := func(err error) (*holder, error) {
		h.stop()
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(h.stderr.Bytes()))
	}
	select {
	case err := <-ready:
		if err != nil {
			return fail(err)
		}
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	kinds := []string{"net"}
	if host {
		kinds = append(kinds, "mnt", "uts")
	}
	h.ns = map[string]string{}
	for _, k := range kinds {
		own, err := os.Readlink("/proc/self/ns/" + k)
		if err != nil {
			return fail(err)
		}
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", h.pid(), k))
		if err != nil {
			return fail(err)
		}
		if its == own {
			return fail(fmt.Errorf("its %s namespace is this process's", k))
		}
		h.ns[k] = its
	}
	return h, nil
}

// stop ends the holder: its stdin closed, it exits (SIGKILL if it has not
// within 5 s).
func (h *holder) stop() error {
	h.stdin.Close()
	select {
	case <-h.waited:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.waited
		return fmt.Errorf("clustertest: namespace holder %d did not end when told; killed", h.pid())
	}
	return nil
}

// nsSh runs the sh script in process pid's namespaces of the given kinds
// (nsenter flags).
func nsSh(ctx context.Context, pid int, kinds []string, script string) error {
	args := append([]string{"--target", strconv.Itoa(pid)}, kinds...)
	args = append(args, "--", "sh", "-c", script)
	out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// killIn SIGKILLs every process in one of the namespaces ns (links such
// as "net:[4026532...]") or holding one open (an nsenter about to enter
// it), until two scans 20 ms apart find none, or for at most limit. A
// process killed is gone from the scan once it has exited (a zombie has
// left its namespaces and closed its files).
func killIn(ns map[string]bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for quiet := 0; quiet < 2; {
		left := procsIn(ns)
		if len(left) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if len(left) > 0 && time.Now().After(deadline) {
			return fmt.Errorf("clustertest: processes %v still in the cluster's namespaces %v after SIGKILL", left, limit)
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// procsIn lists the processes in one of the namespaces ns, or holding one
// open.
func procsIn(ns map[string]bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if inNS(filepath.Join("/proc", e.Name()), ns) {
			pid, _ := strconv.Atoi(e.Name())
			out = append(out, pid)
		}
	}
	return out
}

func inNS(proc string, ns map[string]bool) bool {
	for _, k := range []string{"net", "mnt", "uts"} {
		if l, err := os.Readlink(proc + "/ns/" + k); err == nil && ns[l] {
			return true
		}
	}
	fds, _ := os.ReadDir(proc + "/fd")
	for _, fd := range fds {
		if l, err := os.Readlink(proc + "/fd/" + fd.Name()); err == nil && ns[l] {
			return true
		}
	}
	return false
}

// dirPrefix names the temporary directories of process pid's clusters.
func dirPrefix(pid int) string { return "clustertest-" + strconv.Itoa(pid) + "-" }

// Sweep removes what the clusters of processes that died without closing
// them left behind. Their namespaces went with them, and their links,
// qdiscs and mounts, but not the processes that their commands started
// (an exec.Cmd's process outlives its creator), which keep the hosts'
// namespaces, isolated as they are, until they end: Sweep kills them
// (they are known by their /dev/shm, named for the creator). It also
// removes the clusters' temporary directories. New calls it.
func Sweep() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			mi, err := os.ReadFile("/proc/" + e.Name() + "/mountinfo")
			if err != nil {
				continue
			}
			if creator, ok := strayOf(string(mi)); ok && !alive(creator) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clustertest: processes %v left on the hosts of dead clusters outlive SIGKILL", left)
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m, _ := filepath.Glob(filepath.Join(os.TempDir(), "clustertest-*-*"))
	for _, d := range m {
		f := strings.SplitN(filepath.Base(d), "-", 3)
		if pid, err := strconv.Atoi(f[1]); err == nil && pid > 0 && !alive(pid) {
			os.RemoveAll(d)
		}
	}
	return nil
}

// alive says whether process pid exists (a zombie counts).
func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return !errors.Is(err, os.ErrNotExist)
}
