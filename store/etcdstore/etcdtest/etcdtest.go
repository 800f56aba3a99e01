// Package etcdtest starts a real etcd server for tests: Debian's
// etcd-server package (/usr/bin/etcd), or the binary named by $GODIST_ETCD.
// A test without one is skipped, with a message that says what to install.
//
//	srv := etcdtest.Start(t)      // skips without etcd; stopped at cleanup
//	s, err := etcdstore.New(ctx, []string{srv.Endpoint}, "job/", etcdstore.Options{})
package etcdtest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary returns the etcd server binary the tests use ($GODIST_ETCD, else
// etcd on $PATH, else /usr/bin/etcd), or "" when there is none.
func Binary() string {
	if p := os.Getenv("GODIST_ETCD"); p != "" {
		return p
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	return ""
}

// Server is an etcd server started by Start.
type Server struct {
	// Endpoint is its client address, "127.0.0.1:port".
	Endpoint string

	cmd  *exec.Cmd
	dir  string
	out  *lockedWriter // its stdout and stderr
	once sync.Once
	done chan struct{}
}

// Start starts a one-member etcd cluster on free loopback ports, with its
// data in a fresh directory (in /dev/shm when it can, so that etcd's fsyncs
// cost nothing), waits until it reports itself healthy, and stops it and
// removes the data when t ends. It skips t when there is no etcd binary,
// and fails t when the server does not come up (with its log).
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("etcdtest: no etcd server binary: install Debian's etcd-server (apt-get install etcd-server, /usr/bin/etcd) or set GODIST_ETCD to run the etcd tests")
	}
	var lastErr error
	for range 3 { // a free port may be taken between the probe and etcd's bind
		s, err := start(bin)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("etcdtest: %v", lastErr)
	return nil
}

func start(bin string) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	base := "/dev/shm"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = ""
	}
	dir, err := os.MkdirTemp(base, "godist-etcd-")
	if err != nil {
		if dir, err = os.MkdirTemp("", "godist-etcd-"); err != nil {
			return nil, err
		}
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s := &Server{Endpoint: "127.0.0.1:" + strconv.Itoa(ports[0]), dir: dir, out: &lockedWriter{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin,
		"--name", "godist-test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "godist-test="+peer,
		"--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Should the test binary be killed, the server goes with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			out := s.Log()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s exited at start (%v):\n%s", bin, s.cmd.ProcessState, out)
		default:
		}
		if resp, err := hc.Get(client + "/health"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`)) {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s not healthy at %s after 30s:\n%s", bin, client, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server and removes its data. It is idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.cmd.Process.Kill()
		<-s.done
		os.RemoveAll(s.dir)
	})
}

// Log returns what the server wrote so far.
func (s *Server) Log() string {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.out.b.String()
}

type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
