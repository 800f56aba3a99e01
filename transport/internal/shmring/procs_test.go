package shmring

import (
	"bytes"
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

// peer is the peer process, started by startPeer.
type peer struct {
	cmd  *exec.Cmd
	out  bytes.Buffer  // its stdout and stderr; read only after done
	done chan struct{} // closed once it has exited and out is complete
	err  error         // cmd.Wait's; read only after done
}

// wait waits for the peer to exit. The error names how it ended and
// carries all it wrote, which is where its test failure says why.
func (p *peer) wait() error {
	<-p.done
	if p.err != nil {
		return fmt.Errorf("peer process: %v; it wrote:\n%s", p.err, p.out.Bytes())
	}
	return nil
}

// kill ends the peer, if it still runs, and waits for it to exit.
func (p *peer) kill() error {
	p.cmd.Process.Kill()
	return p.wait()
}

// startPeer makes the shared file and pipes and starts the peer process
// in mode with env. The peer is killed, if it still runs, when tb ends.
func startPeer(tb testing.TB, mode string, env ...string) (*sharedPair, *peer) {
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
	pr := &peer{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = &pr.out
	cmd.Stderr = &pr.out
	// Should the peer leave a process holding its output open, Wait
	// still returns.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	// Our copies of the peer's ends: closed, so that its ends are the
	// only ones, and its exit shows here as the end of fromPeer.
	toR.Close()
	fromW.Close()
	go func() { pr.err = cmd.Wait(); close(pr.done) }()
	tb.Cleanup(func() { pr.kill() })
	return p, pr
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
	// os/exec handed fd 4 over in blocking mode (File.Fd sets it so),
	// and os.NewFile of a blocking fd gives a File whose deadlines do
	// not work: exchange's wait for a wakeup would have no bound.
	if err := syscall.SetNonblock(4, true); err != nil {
		t.Fatalf("wakeup pipe (fd 4): %v", err)
	}
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
		// The parent's exit ends wakeIn, which ends a parked wait; and
		// with it gone nothing needs stopping here.
		if err := exchange(out, in, wakeOut, wakeIn, seed+1, seed, frames, nil); err != nil {
			t.Fatal(err)
		}
	case "echo":
		echo(t, in, out)
	}
}

// exchange pushes frames of stream seedOut to out while popping and
// checking frames of stream seedIn from in, both with random pauses,
// the consumer parking after a random spin and sleeping on wakeIn.
//
// It returns nil once every frame has gone both ways; an error naming
// the frame at the first wrong frame, a corrupt ring, a failed pipe (the
// peer gone ends wakeIn) or a lost wakeup; or an error once quit is
// closed. It never returns while its producer goroutine still touches
// out, so its caller may unmap the rings when it returns.
func exchange(out, in *Ring, wakeOut io.Writer, wakeIn *os.File, seedOut, seedIn, frames uint64, quit <-chan struct{}) error {
	halt := make(chan struct{}) // the consumer side failed: stop pushing
	perr := make(chan error, 1)
	go func() { perr <- produce(out, wakeOut, seedOut, frames, quit, halt) }()
	if err := consume(in, wakeIn, seedIn, frames, quit); err != nil {
		close(halt)
		<-perr
		return err
	}
	return <-perr
}

// produce is exchange's producer. It retries a full ring until the
// consumer has made room, unless quit or halt closes meanwhile: a full
// ring may be a peer that is gone.
func produce(out *Ring, wakeOut io.Writer, seed, frames uint64, quit, halt <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, out.MaxFrame())
	for seq := uint64(0); seq < frames; seq++ {
		b := buf[:frameLen(seed, seq, out.MaxFrame())]
		fillFrame(b, seq)
		for i := 0; ; i++ {
			wake, err := out.TryPush(b)
			if err == ErrFull {
				if i%64 == 63 {
					select {
					case <-quit:
						return fmt.Errorf("pushing frame %d of %d: told to stop while the ring was full (%s)", seq, frames, ringState(out))
					case <-halt:
						return nil
					default:
					}
				}
				runtime.Gosched()
				continue
			}
			if err != nil {
				return fmt.Errorf("pushing frame %d: %w", seq, err)
			}
			if wake {
				if _, err := wakeOut.Write([]byte{1}); err != nil {
					return fmt.Errorf("waking the consumer after frame %d: %w", seq, err)
				}
			}
			break
		}
		if rng.IntN(2048) == 0 {
			time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
		}
	}
	return nil
}

// consume is exchange's consumer: it checks every frame of stream seed
// from in until frames have come, or quit closes while it is parked.
func consume(in *Ring, wakeIn *os.File, seed, frames uint64, quit <-chan struct{}) error {
	rng := rand.New(rand.NewPCG(seed, 2))
	want := make([]byte, in.MaxFrame())
	var seq uint64
	bad := ""
	check := func(f []byte) {
		if bad == "" {
			bad = checkFrame(f, seed, seq, in.MaxFrame(), want)
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
		select {
		case <-quit:
			in.Unpark()
			return fmt.Errorf("told to stop while parked at frame %d of %d", seq, frames)
		default:
		}
		if err := wakeIn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return fmt.Errorf("parked at frame %d: the wakeup pipe takes no deadline: %w", seq, err)
		}
		_, err := wakeIn.Read(drain[:])
		timedOut := errors.Is(err, os.ErrDeadlineExceeded)
		// A lost wakeup, not a slow peer: 10 s on, a frame is there and
		// the park is still on (no TryPush took it). A slow peer, one
		// that has pushed nothing, is waited for; if it is gone,
		// wakeIn ends, and the parent bounds the whole exchange.
		if timedOut && in.head.Load() != in.c.tail {
			state := ringState(in)
			if in.Unpark() {
				return fmt.Errorf("lost wakeup: parked at frame %d, and 10 s later a frame is there and the park still on (%s)", seq, state)
			}
			continue
		}
		in.Unpark()
		if err != nil && !timedOut {
			return fmt.Errorf("parked at frame %d, reading a wakeup: %w", seq, err)
		}
	}
	return nil
}

// ringState shows r's shared counters, for a failure's message.
func ringState(r *Ring) string {
	return fmt.Sprintf("head %d, tail %d, parked %d", r.head.Load(), r.tail.Load(), r.parked.Load())
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
//
// It gives up after 60 s (a run takes a few seconds with -race, several
// times that on a loaded machine), or as soon as the peer fails; either
// way it shows the rings' counters and the peer's output, and it stops
// its own exchange before the cleanups unmap the rings.
func TestTwoProcesses(t *testing.T) {
	frames := uint64(100_000)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	p, pr := startPeer(t, "stream", envSeed+"="+strconv.FormatUint(seed, 10), envCount+"="+strconv.FormatUint(frames, 10))
	out, err := Attach(p.a)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Attach(p.b)
	if err != nil {
		t.Fatal(err)
	}
	quit := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- exchange(out, in, p.toPeer, p.fromPeer, seed, seed+1, frames, quit) }()

	giveUp := time.NewTimer(60 * time.Second)
	defer giveUp.Stop()
	peerDone := pr.done
	var why string // why this side stopped waiting for the exchange
	exchanging := true
	for why == "" {
		select {
		case err = <-errc:
			exchanging = false
			if err != nil {
				why = "failed"
			} else {
				why = "done"
			}
		case <-peerDone:
			peerDone = nil // a peer that is through may exit first
			if pr.err != nil {
				why = "peer failed"
			}
		case <-giveUp.C:
			why = "no end after 60 s"
		}
	}
	if why == "done" {
		// The peer has every frame, so it is about to exit.
		select {
		case <-pr.done:
		case <-giveUp.C:
			why = "peer did not exit in 60 s"
		}
	}
	if why != "done" {
		state := fmt.Sprintf("ring to the peer: %s; ring from it: %s", ringState(out), ringState(in))
		// The peer's exit ends our wakeup pipe, which wakes a parked
		// consumer, and quit stops a producer facing a full ring; then
		// the exchange returns. Wait for it: it touches the rings,
		// which the cleanups unmap.
		close(quit)
		pr.kill()
		if exchanging {
			err = <-errc
		}
		t.Errorf("seed %d: %s: %v; %s", seed, why, err, state)
	}
	if err := pr.wait(); err != nil {
		t.Errorf("seed %d: %v", seed, err)
	}
}
