package clustertest

import (
	"bytes"
	"context"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestOpenMPIAcrossHosts: OpenMPI's mpirun, run on node0 with RshAgent as
// its plm_rsh_agent, starts a rank on each host.
func TestOpenMPIAcrossHosts(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun (OpenMPI) here")
	}
	c := Start(t, Config{Hosts: 2, ShareCPUs: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent, err := c.RshAgent()
	if err != nil {
		t.Fatal(err)
	}
	// A host the agent does not know fails as ssh would.
	if out, err := exec.CommandContext(ctx, agent, "-x", "nohost", "true").CombinedOutput(); err == nil || !strings.Contains(string(out), "no host nohost") {
		t.Errorf("the agent with an unknown host: %v: %s", err, out)
	}
	// A command line is run by the host's shell, as ssh's is.
	if out, err := exec.CommandContext(ctx, agent, c.Host(1).Addr.String(), "echo", "'a  b'", "$(cat /proc/sys/kernel/hostname)").Output(); err != nil || string(out) != "a  b node1\n" {
		t.Errorf("the agent on node1's address: %q, %v", out, err)
	}
	out := run(ctx, t, c, 0, nil, mpirun, "--allow-run-as-root", "--mca", "plm_rsh_agent", agent,
		"--host", "node0,node1", "-np", "2", "--bind-to", "none",
		"sh", "-c", `echo "$OMPI_COMM_WORLD_RANK $(cat /proc/sys/kernel/hostname) $(stat -c %d /dev/shm)"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	t.Logf("mpirun's ranks: %q", lines)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "0 node0 ") || !strings.HasPrefix(lines[1], "1 node1 ") ||
		strings.Fields(lines[0])[2] == strings.Fields(lines[1])[2] {
		t.Errorf("mpirun's ranks: %q, want rank 0 on node0 and rank 1 on node1, each with its /dev/shm", lines)
	}
}

// TestGodistUnderMpirunAcrossHosts: mpirun on node0 starts the same job
// as TestGodistRunAcrossHosts (2 ranks on each host; MASTER_ADDR, which
// an MPI launcher would take to be on each rank's own host, names node0;
// GODIST_TOKEN passed on), and it all-reduces across the hosts as well.
func TestGodistUnderMpirunAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds godist and runs a job")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("no mpirun (OpenMPI) here")
	}
	c := Start(t, Config{Hosts: 2, ShareCPUs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, worker := buildBins(ctx, t)
	agent, err := c.RshAgent()
	if err != nil {
		t.Fatal(err)
	}
	const script = `echo "HOST $(cat /proc/sys/kernel/hostname) SHM $(stat -c %d:%i /dev/shm)"; exec "$0" --steps 8 --log`
	cmd := c.Command(ctx, 0, mpirun, "--allow-run-as-root", "--mca", "plm_rsh_agent", agent,
		"--host", "node0:2,node1:2", "-np", "4", "--bind-to", "none", "--tag-output",
		"-x", "MASTER_ADDR=node0", "-x", "MASTER_PORT=29500", "-x", "GODIST_TOKEN",
		"sh", "-c", script, worker)
	cmd.Env = jobEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("mpirun: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	t.Logf("the job ran in %v", time.Since(start).Round(time.Millisecond))
	if want := "[1,0]<stdout>:RESULT 360 WORLD_SIZE 4\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("mpirun's output lacks %q:\n%s", want, &stdout)
	}
	checkRanks(t, `\[\d+,(\d)\]<std(?:out|err)>:`, stdout.String(), stderr.String())
	if t.Failed() || testing.Verbose() {
		t.Logf("stdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
}
