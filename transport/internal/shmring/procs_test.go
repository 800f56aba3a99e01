package shmring

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Two processes over a real shared mapping: the test creates a file in
// /dev/shm holding two rings (one each way) and two pipes for wakeups,
// and runs this test binary again as the peer (TestPeerProcess), which
// maps the same file and attaches.

const procCapacity = 4096

const (
	envPeer  = "SHMRING_PEER" // "stream", "echo" or "tcpecho"
	envSeed  = "SHMRING_SEED"
	envCount = "SHMRING_FRAMES"
)

// sharedPair is what the two processes share: the file, its mapping
// split into two rings' memory, and the two wakeup pipes (theirs, ours).
type sharedPair struct {
	file      *os.File
	mem       []byte
	a, b      []byte   // parent->child, child->parent
	toPeer    *os.File // wakeups for the peer's consumer
	fromPeer  *os.File // wakeups for ours
	peerFiles []*os.File
}

func mapShared(f *os.File) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, 2*Size(procCapacity), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func split(mem []byte) (a, b []byte) {
	n := Size(procCapacity)
	return mem[:n:n], mem[n : 2*n : 2*n]
}

// startPeer makes the shared file and pipes and starts the peer process
// in mode with env.
func startPeer(tb testing.TB, mode string, env ...string) (*sharedPair, *exec.Cmd, func() error) {
	tb.Helper()
	f, err := os.CreateTemp("/dev/shm", "godist-shmring-test-")
	if err != nil {
		tb.Skipf("no /dev/shm: %v", err)
	}
	tb.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	if err := f.Truncate(int64(2 * Size(procCapacity))); err != nil {
		tb.Fatal(err)
	}
	mem, err := mapShared(f)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Munmap(mem) })
	p := &sharedPair{file: f, mem: mem}
	p.a, p.b = split(mem)
	if _, err := Init(p.a); err != nil {
		tb.Fatal(err)
	}
	if _, err := Init(p.b); err != nil {
		tb.Fatal(err)
	}
	toR, toW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	p.toPeer, p.fromPeer = toW, fromR
	tb.Cleanup(func() { toW.Close(); fromR.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerProcess$", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(append(os.Environ(), envPeer+"="+mode), env...)
	cmd.ExtraFiles = []*os.File{f, toR, fromW} // fds 3, 4, 5
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	toR.Close()
	fromW.Close()
	done := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(out); done <- b }()
	wait := func() error {
		b := <-done
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("peer: %v\n%s", err, b)
		}
		return nil
	}
	return p, cmd, wait
}

// TestPeerProcess is the peer's side; it runs only when started by
// startPeer.
func TestPeerProcess(t *testing.T) {
	mode := os.Getenv(envPeer)
	if mode == "" {
		t.Skip("runs as the peer of a two-process test")
	}
	if mode == "tcpecho" {
		tcpEchoPeer(t)
		return
	}
	f := os.NewFile(3, "shm")
	wakeIn, wakeOut := os.NewFile(4, "wake-in"), os.NewFile(5, "wake-out")
	mem, err := mapShared(f)
	if err != nil {
		t.Fatal(err)
	}
	a, b := split(mem)
	in, err := Attach(a)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Attach(b)
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "stream":
		seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
		frames, _ := strconv.ParseUint(os.Getenv(envCount), 10, 64)
		if err := exchange(out, in, wakeOut, wakeIn, seed+1, seed, frames); err != nil {
			t.Fatal(err)
		}
	case "echo":
		echo(t, in, out)
	}
}

// exchange pushes frames of stream seedOut to out while popping and
// checking frames of stream seedIn from in, both with random pauses,
// the consumer parking after a random spin and sleeping on wakeIn.
func exchange(out, in *Ring, wakeOut io.Writer, wakeIn *os.File, seedOut, seedIn, frames uint64) error {
	errc := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seedOut, 1))
		buf := make([]byte, out.MaxFrame())
		for seq := uint64(0); seq < frames; seq++ {
			b := buf[:frameLen(seedOut, seq, out.MaxFrame())]
			fillFrame(b, seq)
			for {
				wake, err := out.TryPush(b)
				if err == ErrFull {
					runtime.Gosched()
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				if wake {
					if _, err := wakeOut.Write([]byte{1}); err != nil {
						errc <- err
						return
					}
				}
				break
			}
			if rng.IntN(2048) == 0 {
				time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
			}
		}
		errc <- nil
	}()
	rng := rand.New(rand.NewPCG(seedIn, 2))
	want := make([]byte, in.MaxFrame())
	var seq uint64
	bad := ""
	check := func(f []byte) {
		if bad == "" {
			bad = checkFrame(f, seedIn, seq, in.MaxFrame(), want)
		}
		seq++
	}
	var drain [64]byte
	for seq < frames {
		got := false
		for range rng.IntN(256) + 1 {
			ok, err := in.TryPop(check)
			if err != nil {
				return fmt.Errorf("frame %d: %w", seq, err)
			}
			if bad != "" {
				return fmt.Errorf("frame %d: wrong %s", seq-1, bad)
			}
			if ok {
				got = true
				break
			}
		}
		if got || !in.Park() {
			continue
		}
		wakeIn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := wakeIn.Read(drain[:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("lost wakeup: parked at frame %d for 10 s", seq)
			}
			return err
		}
		in.Unpark()
	}
	return <-errc
}

// echo sends every frame from in back on out, spinning, until an empty
// frame (which it echoes too).
func echo(t *testing.T, in, out *Ring) {
	var n int
	buf := make([]byte, in.MaxFrame())
	for {
		ok, err := in.TryPop(func(f []byte) { n = copy(buf, f) })
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		for {
			_, err := out.TryPush(buf[:n])
			if err == nil {
				break
			}
			if err != ErrFull {
				t.Fatal(err)
			}
		}
		if n == 0 {
			return
		}
	}
}

// TestTwoProcesses passes 100k frames each way between this process and
// another through a mapping of one file in /dev/shm, with wakeups over
// pipes: every frame arrives, in order, intact, in both.
func TestTwoProcesses(t *testing.T) {
	frames := uint64(100_000)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	p, cmd, wait := startPeer(t, "stream", envSeed+"="+strconv.FormatUint(seed, 10), envCount+"="+strconv.FormatUint(frames, 10))
	out, err := Attach(p.a)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Attach(p.b)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- exchange(out, in, p.toPeer, p.fromPeer, seed, seed+1, frames) }()
	select {
	case err := <-errc:
		if err != nil {
			cmd.Process.Kill()
			wait()
			t.Fatalf("seed %d: %v", seed, err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("seed %d: no end after 60 s", seed)
	}
	if err := wait(); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
}
