// Package clustertest makes a cluster of hosts on this machine, for tests
// and benchmarks that need godist across hosts: each host has its own
// network (a veth link to a shared bridge, shaped to a rate with tbf),
// its own /dev/shm (so godist's host identity, the boot id with
// /dev/shm's device and inode, tells the hosts apart), its own hostname
// and /etc/hosts naming every host, and its own CPUs (an affinity mask).
//
//	c := clustertest.Start(t, clustertest.Config{Hosts: 2, Rate: 100 * clustertest.Mbit})
//	srv := c.Command(ctx, 1, "./server", "--listen", ":7000")   // on node1
//	cli := c.Command(ctx, 0, "./client", "node1:7000")          // on node0, reaching node1 at 10.77.0.2
//
// Start skips the test when this process cannot make hosts (Available:
// it needs root, and ip and tc from iproute2, nsenter, unshare, taskset
// and mount from util-linux), and closes the cluster when the test ends;
// New and Close do the same for code that is not a test.
//
// # What a cluster is
//
// Every cluster is its own: a "switch" network namespace holding the
// bridge br0, and for each host network, mount and UTS namespaces, with
// host i's end of its link named eth0 and the switch's p<i>. Nothing is
// added to the caller's namespaces (no link, address, route or mount; no
// name under /run/netns), so clusters, in one process or several, never
// collide, and any number may use the same subnet. Each set of namespaces
// is held by a process (unshare, then cat reading a pipe from this
// process): when the cluster closes, or when this process dies in any
// way, the holders end, and the namespaces go with them, and with them
// the links, qdiscs and mounts, once no process is left in them. Close
// kills the processes on the hosts; when this process is killed before
// it can, those its commands started live on (as any exec.Cmd's
// process does), isolated in the hosts' namespaces, until Sweep (which
// every New calls) finds them by their /dev/shm, named for the dead
// creator, and kills them, and removes the cluster's temporary
// directory.
//
// A host's mount namespace is a copy of the caller's, a slave of it, with
// a tmpfs of its own on /dev/shm and its own /etc/hosts: commands on one
// host share its /dev/shm, and see the rest of the machine's files as the
// caller does. Processes are not isolated (there is no PID namespace): a
// host's processes see every process on the machine, as under a launcher
// that runs on one machine.
//
// # Links
//
// Host i is at the (i+1)th address of Config.Subnet (10.77.0.0/24 unless
// set), on a link shaped both ways to Config.Rate (SetRate changes one),
// as a switch port and a NIC of that rate would: traffic from host i
// passes its eth0's tbf, then the switch's port to its destination, so a
// transfer runs at the slower of the two hosts' rates. A TCP transfer's
// payload runs at about 95% of the rate (tbf counts frames with their
// headers). Up to 1 Gbit/s the packets are paced too, so that a burst
// after a quiet spell takes its time on the wire as from a NIC rather
// than passing at once from the bucket tbf filled meanwhile (plan.go's
// tbf says why, and why not above). The kernels this runs on have no netem, so there is no delay
// or loss here; nftables rules, or godist's in-process faulty transport,
// can add them.
//
// # CPUs
//
// Hosts of a real cluster do not share CPUs. By default each host is
// pinned to CPUs of its own, the CPUs this process may use divided among
// the hosts (Config.CPUsPerHost sets how many each gets); when there are
// too few for every host to have its own, New fails with ErrTooFewCPUs
// unless Config.ShareCPUs lets hosts share them (round robin), which a
// test on a small machine (two CPUs, three hosts) needs and a benchmark
// should report.
//
// # Commands
//
// Command returns an exec.Cmd that runs a program on a host: nsenter
// enters the host's namespaces, taskset pins it, and both exec the
// program, so the process the Cmd waits for and kills is the program.
// Argv gives that command line for scripts that start commands on hosts
// themselves. Close kills whatever still runs on the hosts.
package clustertest
