package dist

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/godist/godist/internal/handshake"
)

// Env is the identity Init found in the environment.
type Env struct {
	Rank, WorldSize, LocalRank int
	MasterAddr                 string
	MasterPort                 int
	Source                     string // which launcher's variables were used
	// JobID names the job of the launcher that gave the rank, the same
	// on every rank of one job and different between jobs: for Slurm
	// "slurm:JOB.STEP" (SLURM_JOB_ID, SLURM_STEP_ID), for OpenMPI's
	// mpirun "openmpi:NS" (PMIX_NAMESPACE, else OMPI_MCA_ess_base_jobid).
	// It is "" for RANK and WORLD_SIZE, whose launchers (godist run,
	// torchrun) set a run id instead, and for MPICH's and Intel MPI's
	// mpiexec, which set no variable that names the job.
	JobID string
}

// ReadEnv reads a rank's identity from the environment: godist run and
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the first host of
// SLURM_JOB_NODELIST as the master), OpenMPI's mpirun
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK)
// and MPICH's or Intel MPI's mpiexec (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID); an MPI launcher implies a master on this host.
// MASTER_ADDR and MASTER_PORT, when set, win over what a launcher implies.
// Env.JobID names the launcher's job.
func ReadEnv() (Env, error) { return readEnv(os.Getenv, true) }

// readEnv is ReadEnv with get reading the variables; without needMaster,
// a missing MASTER_ADDR is no error.
func readEnv(get func(string) string, needMaster bool) (Env, error) {
	e := Env{LocalRank: -1, MasterPort: 29500}
	atoi := func(name string) (int, bool, error) {
		s := get(name)
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, true, fmt.Errorf("dist: %s=%q is not a number", name, s)
		}
		return n, true, nil
	}
	type source struct {
		name              string
		rank, size, local string
		defaultMaster     func() string
	}
	sources := []source{
		{"env", "RANK", "WORLD_SIZE", "LOCAL_RANK", nil},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", func() string { return firstSlurmHost(get("SLURM_JOB_NODELIST")) }},
		{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", func() string { return "127.0.0.1" }},
		{"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", func() string { return "127.0.0.1" }}, // MPICH's and Intel MPI's Hydra
	}
	found := false
	for _, s := range sources {
		r, okR, err := atoi(s.rank)
		if err != nil {
			return e, err
		}
		n, okN, err := atoi(s.size)
		if err != nil {
			return e, err
		}
		if !okR || !okN {
			continue
		}
		l, okL, err := atoi(s.local)
		if err != nil {
			return e, err
		}
		if !okL {
			l = -1
		}
		e.Rank, e.WorldSize, e.LocalRank, e.Source = r, n, l, s.name
		e.JobID, _ = launcherJob(s.name, get)
		if s.defaultMaster != nil {
			e.MasterAddr = s.defaultMaster()
		}
		found = true
		break
	}
	if !found {
		return e, fmt.Errorf("dist: env:// needs RANK and WORLD_SIZE (or Slurm's SLURM_PROCID/SLURM_NTASKS, OpenMPI's OMPI_COMM_WORLD_RANK/SIZE, or MPICH's PMI_RANK/PMI_SIZE); start the program with godist run or set them")
	}
	if a := get("MASTER_ADDR"); a != "" {
		e.MasterAddr = a
	}
	if p, ok, err := atoi("MASTER_PORT"); err != nil {
		return e, err
	} else if ok {
		e.MasterPort = p
	}
	if e.MasterAddr == "" && needMaster {
		if e.Source == "slurm" {
			return e, fmt.Errorf("dist: env:// under Slurm needs SLURM_JOB_NODELIST (rank 0 runs on its first host) or MASTER_ADDR (the host of rank 0); neither is set")
		}
		return e, fmt.Errorf("dist: env:// needs MASTER_ADDR (the host of rank 0)")
	}
	if e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize {
		return e, fmt.Errorf("dist: rank %d of world size %d (from %s variables)", e.Rank, e.WorldSize, e.Source)
	}
	return e, nil
}

// launcherJob returns the job id of the launcher whose variables gave the
// rank (source, as Env.Source) and the variables it comes from, or "" (see
// Env.JobID). get reads a variable.
func launcherJob(source string, get func(string) string) (id, from string) {
	first := func(names ...string) (string, string) {
		for _, n := range names {
			if v := get(n); v != "" {
				return v, n
			}
		}
		return "", ""
	}
	switch source {
	case "slurm":
		job, jobVar := first("SLURM_JOB_ID", "SLURM_JOBID")
		if job == "" {
			return "", ""
		}
		// One srun is one step: two steps of an allocation are two jobs.
		if step, stepVar := first("SLURM_STEP_ID", "SLURM_STEPID"); step != "" {
			return fitJobID("slurm:" + job + "." + step), jobVar + " and " + stepVar
		}
		return fitJobID("slurm:" + job), jobVar
	case "mpirun":
		// OpenMPI 4 sets both, to the same number; OpenMPI 5 (PRRTE)
		// sets PMIX_NAMESPACE; older ones OMPI_MCA_orte_ess_jobid.
		if v, n := first("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"); v != "" {
			return fitJobID("openmpi:" + v), n
		}
	}
	return "", ""
}

// masterJobID is the job id of a job with neither a run id nor a
// launcher's job: the address of its store, with the spellings of this
// host's loopback that Init binds alike.
func masterJobID(host string, port int) string {
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return fitJobID("master:" + net.JoinHostPort(host, strconv.Itoa(port)))
}

// fitJobID returns a derived job id that the handshake can carry (255
// bytes at most): id itself, or when longer its first bytes and a hash of
// the whole.
func fitJobID(id string) string {
	if len(id) <= 255 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:255-33] + "~" + hex.EncodeToString(sum[:16])
}

// otherJobError returns, when err (from reaching what: the store, a peer)
// is a job id mismatch, an error that says so, where this rank's job id
// came from and what to do; otherwise nil.
func otherJobError(err error, rank int, what, job, from string) error {
	var me *handshake.MismatchError
	if !errors.As(err, &me) || me.Field != "job id" {
		return nil
	}
	return fmt.Errorf("dist: rank %d: %s belongs to another job, %s (this rank's job is %q, from %s): two jobs meet at one port; give each job on a host its own MASTER_PORT (or, if they are one job, every rank the same GODIST_RUN_ID): %w",
		rank, what, me.Remote, job, from, err)
}

// firstSlurmHost returns the first host of a Slurm node list such as
// "node[01-04,07],gpu2" (node01) or "rack[1-2]-ib" (rack1-ib).
func firstSlurmHost(list string) string {
	list = strings.TrimSpace(list)
	if list == "" {
		return ""
	}
	i := strings.IndexAny(list, "[,")
	if i < 0 {
		return list
	}
	if list[i] == ',' {
		return list[:i]
	}
	prefix, rest := list[:i], list[i+1:]
	close := strings.IndexByte(rest, ']')
	if close < 0 {
		return prefix
	}
	first := rest[:close]
	if j := strings.IndexAny(first, "-,"); j >= 0 {
		first = first[:j]
	}
	suffix := rest[close+1:]
	if j := strings.IndexAny(suffix, ",["); j >= 0 {
		suffix = suffix[:j]
	}
	return prefix + first + suffix
}
