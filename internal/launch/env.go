package launch

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"strings"
)

// Identity lists the variables that say who a worker is and which job it
// belongs to: every launcher sets those it needs for each worker, and
// [Env] removes all of them from the environment a worker would
// otherwise inherit, so that a launcher started from inside another job's
// worker (a spawn.Run program run under godist run, say) never hands its
// children a stale rank, port, token or error file.
//
// Settings that are not an identity pass through: GODIST_HOST (the
// address a rank publishes; a launcher that must keep its ranks on
// loopback drops it itself), GODIST_SHM, GODIST_SPIN_US, GOMAXPROCS, ...
// So do other launchers' variables (SLURM_*, OMPI_*), which dist.Init
// reads only when RANK is unset, and every launcher sets RANK.
var Identity = []string{
	// torchrun's
	"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
	"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE",
	"MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", TorchErrorFileEnv,
	// godist's
	"GODIST_RESTART_COUNT", "GODIST_MAX_RESTARTS", "GODIST_RUN_ID", "GODIST_TOKEN", ErrorFileEnv,
	"GODIST_INIT_METHOD", // a store for this job and round (etcd)
	SpawnRankEnv,
	// the launcher's watchdog and gates (never a worker's)
	watchdogEnv, gateEnv,
}

// SpawnRankEnv is the variable that marks a process started by spawn.Run
// as a worker, holding its rank (spawn.RankEnv).
const SpawnRankEnv = "GODIST_SPAWN_RANK"

// Env returns a worker's environment: base without the [Identity]
// variables, the variables named in drop, and those set assigns, followed
// by set (KEY=VALUE entries). base keeps its order; base and set are not
// modified.
func Env(base, set []string, drop ...string) []string {
	gone := make(map[string]bool, len(Identity)+len(drop)+len(set))
	for _, k := range Identity {
		gone[k] = true
	}
	for _, k := range drop {
		gone[k] = true
	}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		gone[k] = true
	}
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !gone[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// Lookup returns the value of key in env (KEY=VALUE entries; the last
// wins, as in exec.Cmd) and whether it is there.
func Lookup(env []string, key string) (string, bool) {
	val, ok := "", false
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			val, ok = v, true
		}
	}
	return val, ok
}

// Rank is what every launcher tells a worker about its place in the job,
// in env://'s variables.
type Rank struct {
	Rank, LocalRank           int
	WorldSize, LocalWorldSize int
	MasterAddr                string
	MasterPort                int
	RunID                     string // GODIST_RUN_ID
	Token                     string // GODIST_TOKEN (hex); left out when empty
	// ErrorFile is where the worker writes a [Record] if it fails:
	// GODIST_ERROR_FILE and TORCHELASTIC_ERROR_FILE; left out when empty.
	ErrorFile string
}

// Vars returns r as KEY=VALUE entries, for [Env]'s set.
func (r Rank) Vars() []string {
	itoa := strconv.Itoa
	v := []string{
		"RANK=" + itoa(r.Rank), "LOCAL_RANK=" + itoa(r.LocalRank),
		"WORLD_SIZE=" + itoa(r.WorldSize), "LOCAL_WORLD_SIZE=" + itoa(r.LocalWorldSize),
		"MASTER_ADDR=" + r.MasterAddr, "MASTER_PORT=" + itoa(r.MasterPort),
		"GODIST_RUN_ID=" + r.RunID,
	}
	if r.Token != "" {
		v = append(v, "GODIST_TOKEN="+r.Token)
	}
	return append(v, ErrorFileVars(r.ErrorFile)...)
}

// ErrorFileVars returns the variables that give a worker its error file:
// GODIST_ERROR_FILE and TORCHELASTIC_ERROR_FILE, or none for "".
func ErrorFileVars(path string) []string {
	if path == "" {
		return nil
	}
	return []string{ErrorFileEnv + "=" + path, TorchErrorFileEnv + "=" + path}
}

// RandomHex returns n random bytes, hex encoded.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// NewToken returns a fresh job token: 16 random bytes, hex encoded, as
// GODIST_TOKEN carries it.
func NewToken() string { return RandomHex(16) }

// FreePort returns a TCP port that was free on host a moment ago ("" for
// every interface, "127.0.0.1" for loopback).
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
