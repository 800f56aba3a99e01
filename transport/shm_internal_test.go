package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/store"
)

// TestShmSlotReleasedWhenHeaderNeverLeaves: a send that took a slot and
// copied its payload there, then gave up (its context ended) before any
// byte of the header was written, frees the slot: otherwise every later
// send would wait for a slot the peer will never free.
func TestShmSlotReleasedWhenHeaderNeverLeaves(t *testing.T) {
	a, b := net.Pipe() // writes block until the other end reads: nobody reads b
	defer a.Close()
	defer b.Close()
	l := newTCPLink(a)
	l.shm = &shmOut{seg: &shmSeg{mem: make([]byte, shmSegment)}, down: new(atomic.Bool)}
	for range shmSlots + 1 { // more sends than slots: each must find one free
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := l.send(ctx, &Header{Kind: KindData}, [][]byte{make([]byte, 64<<10)})
		cancel()
		var ns notSent
		if !errors.As(err, &ns) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("send to a peer that never reads: %v, want notSent wrapping the context's error", err)
		}
		for i := range shmSlots {
			if s := l.shm.seg.state(i).Load(); s != 0 {
				t.Fatalf("slot %d still taken (state %d) after a send that never left", i, s)
			}
		}
	}
}

// TestShmFallbackLogged: a rank with shared memory on says through its
// logger which peers it cannot use it with and why; a rank with it off,
// or whose peers all share it, says nothing.
func TestShmFallbackLogged(t *testing.T) {
	if _, err := hostID(); err != nil {
		t.Skipf("no shared-memory domain here: %v", err)
	}
	for _, c := range []struct {
		name    string
		enabled bool
		peer    string // what rank 1 publishes: "1" (wants shared memory) or "0", then its host label
		want    string // in the log; "" for nothing
	}{
		{"peer elsewhere", true, "1another-host/1/2", `level=INFO msg="transport: shared memory not used: peers on other hosts; large payloads go over TCP" rank=0 peers=[1]`},
		{"peer off", true, "0another-host/1/2", `level=INFO msg="transport: shared memory not used: peers with it off or unavailable; large payloads go over TCP" rank=0 peers=[1]`},
		{"off here", false, "1another-host/1/2", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st := store.NewMem()
			defer st.Close()
			if err := st.Set(ctx, "transport/shm/host/1", []byte(c.peer)); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: dropTime}))
			out, in, hosts, err := setupShm(ctx, st, "", 0, 2, c.enabled, false, log, "k0", func(int) string { return "k1" })
			if err != nil {
				t.Fatal(err)
			}
			// The labels are known whether shared memory is on or not.
			if id, _ := hostID(); hosts[0] != id || hosts[1] != "another-host/1/2" {
				t.Errorf("hosts %q, want [%q another-host/1/2]", hosts, id)
			}
			if out[1] != nil || in[1] != nil {
				t.Fatalf("segments with a peer that cannot share memory: out %v in %v", out[1], in[1])
			}
			if got := strings.TrimSpace(buf.String()); got != c.want {
				t.Errorf("log:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
	t.Run("same host", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st := store.NewMem()
		defer st.Close()
		var buf syncBuffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var out, in [2][]*shmSeg
		var labels [2][]string
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() {
				var err error
				out[r], in[r], labels[r], err = setupShm(ctx, st, "", r, 2, true, false, log, fmt.Sprintf("k%d", r), func(p int) string { return fmt.Sprintf("k%d", p) })
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for r := range 2 {
			if out[r][1-r] == nil || in[r][1-r] == nil {
				t.Errorf("rank %d: no segments with its same-host peer; log:\n%s", r, buf.String())
			}
			out[r][1-r].unmap()
			in[r][1-r].unmap()
		}
		if buf.String() != "" {
			t.Errorf("log of a job all on one host:\n%s", buf.String())
		}
		for r := range 2 {
			if labels[r][0] == "" || labels[r][0] != labels[r][1] {
				t.Errorf("rank %d: host labels %q, want the same one twice", r, labels[r])
			}
		}
	})
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOthersRun: a sender waiting for a slot sees whether goroutines of
// its process wait for the P (then it sleeps through the runtime rather
// than hold the P in a futex); with none waiting it says so.
//
// One Gosched in 61 takes its own goroutine back at once (the scheduler
// looks at the global queue first every 61st time, and Gosched has just
// put it there), so the waiting goroutine is looked for twice; and a
// goroutine that ran before the call (the test preempted) shows nothing,
// so the case is tried again.
func TestOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for attempt := 0; ; attempt++ {
		var calling, early atomic.Bool
		done := make(chan struct{})
		go func() { // runnable, and busy for 200 µs once it runs
			early.Store(!calling.Load())
			start := time.Now()
			for time.Since(start) < 200*time.Microsecond {
			}
			close(done)
		}()
		calling.Store(true)
		saw := othersRun() || othersRun()
		<-done
		if early.Load() && attempt < 10 {
			continue
		}
		if !saw {
			t.Errorf("a goroutine waited for the only P, and othersRun did not see it (attempt %d, ran before the call: %v)", attempt, early.Load())
		}
		break
	}
	// With nothing else to run it says so, at least once in a second (a
	// garbage collection's workers, or a thread preempted by another
	// process in the middle of the call, are others for a while).
	calls := 0
	for deadline := time.Now().Add(time.Second); othersRun(); calls++ {
		if time.Now().After(deadline) {
			t.Fatalf("nothing else to run, and othersRun said there was, %d times in a second", calls)
		}
	}
}

// TestShmMessageWholeWhileInFlight: a message of fragMin bytes or more
// goes through the slots in fragments when the receiver holds none (its
// copies in and out overlap), and whole, in one slot, while messages are
// in flight (theirs overlap already, and one message does not take every
// slot).
func TestShmMessageWholeWhileInFlight(t *testing.T) {
	for _, busy := range []bool{false, true} {
		a, b := net.Pipe()
		frames := make(chan Header, 8)
		go func() { // the peer: reads each frame's header (slot frames have no body)
			for {
				buf := make([]byte, HeaderSize)
				if _, err := io.ReadFull(b, buf); err != nil {
					close(frames)
					return
				}
				h, err := decodeHeader(buf)
				if err != nil {
					t.Errorf("a header: %v", err)
				}
				frames <- h
			}
		}()
		l := newTCPLink(a)
		l.shm = &shmOut{seg: &shmSeg{mem: make([]byte, shmSegment)}, down: new(atomic.Bool)}
		if busy {
			l.shm.seg.state(shmSlots - 1).Store(1) // a message in flight, not yet copied out
		}
		// Bounded: fragments would wait for the slot in flight forever.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.send(ctx, &Header{Kind: KindMessage, Len: 1 << 20}, [][]byte{make([]byte, 1<<20)})
		cancel()
		if err != nil {
			t.Fatalf("busy %v: %v", busy, err)
		}
		a.Close()
		var got []Header
		for h := range frames {
			got = append(got, h)
		}
		b.Close()
		taken := 0
		for i := range shmSlots {
			if l.shm.seg.state(i).Load() != 0 {
				taken++
			}
		}
		if !busy && (len(got) != shmSlots || got[0].Frag&FragFirst == 0 || taken != shmSlots) {
			t.Errorf("idle slots: %d frames %+v, %d slots taken; want %d fragments in every slot", len(got), got, taken, shmSlots)
		}
		if busy && (len(got) != 1 || got[0].Kind != KindShmMessage || got[0].Frag != 0 || got[0].Len != 1<<20 || taken != 2) {
			t.Errorf("a message in flight: %d frames %+v, %d slots taken; want the message whole in one slot", len(got), got, taken)
		}
	}
}
