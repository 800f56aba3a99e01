package transport

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/godist/godist/store"
)

// A rank that dies while the others are still in NewTCP must make every
// one of them fail promptly, naming it, and not let one of them return an
// endpoint with a dead peer at its deadline. NewTCP watches for that with
// an initWatch:
//
//   - a peer connected to this rank: its socket is watched (a peek that
//     reads nothing) until the reader loops start; an end of stream means
//     the peer died or gave up;
//   - a higher rank that has published its address but not connected yet:
//     its listener, which stays open until its NewTCP returns, is probed;
//     a refused connection means its process is gone (a lower rank's dial
//     that is refused means the same);
//   - every rank: the store's abort key, which the first rank to see a
//     death sets (write-once by compare-and-set), so that the ranks that
//     saw nothing themselves, and those that see a survivor leave after
//     it, all name the rank that died first.
type initWatch struct {
	ctx    context.Context // ends with the first death seen, or stop
	cancel context.CancelCauseFunc
	st     store.Store
	key    string // the abort key
	rank   int
	wg     sync.WaitGroup
	mu     sync.Mutex
	stops  []func()
	first  *PeerError // the first death seen by this rank

	abortDone chan struct{} // closed when the abort key's Get returned
	abort     error         // what it read, if anything; set before abortDone closes
}

// probeEvery is how often a rank probes the listener of a higher rank
// that has not connected to it yet.
const probeEvery = 500 * time.Millisecond

func newInitWatch(ctx context.Context, st store.Store, key string, rank int) *initWatch {
	w := &initWatch{st: st, key: key, rank: rank, abortDone: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(w.abortDone)
		v, err := st.Get(w.ctx, key)
		if err == nil {
			w.abort = decodeAbort(v)
			w.cancel(w.abort)
		}
	}()
	return w
}

// gone reports that rank r left during Init, for why (seen by this rank):
// it records that in the store unless another rank recorded a death
// first, ends w's context, and returns the error NewTCP fails with (the
// first death recorded).
func (w *initWatch) gone(r int, why string) error {
	mine := &PeerError{Rank: r, Err: fmt.Errorf("%w: %s (seen by rank %d)", ErrGoneDuringInit, why, w.rank)}
	// The first death seen here wins over later ones (a survivor that
	// left because of it) when the store cannot say which came first.
	w.mu.Lock()
	if w.first == nil {
		w.first = mine
	}
	first := w.first
	w.mu.Unlock()
	err := error(first)
	// Best effort, and bounded: w.ctx may be over, and the store may be
	// what died.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 2*time.Second)
	defer cancel()
	rec := strconv.Itoa(first.Rank) + " " + first.Err.Error()
	got, cerr := w.st.CompareAndSet(ctx, w.key, nil, []byte(rec))
	switch {
	case cerr == nil && string(got) != rec:
		err = decodeAbort(got) // another rank saw a death first
	case cerr != nil:
		// The store is gone (its host left after it saw the death): what
		// it pushed to the abort key's Get before it went is still the
		// verdict, better than the order of ends of stream seen here.
		t := time.NewTimer(settleFor)
		select {
		case <-w.abortDone:
			if w.abort != nil {
				err = w.abort
			}
		case <-t.C:
		}
		t.Stop()
	}
	w.cancel(err)
	if c := w.cause(); c != nil {
		return c // the first death recorded here
	}
	return err
}

// settle gives the watchers a moment to see a death when NewTCP fails
// for another reason (the store's connection lost, a peer gone without a
// word): that failure is often the death's echo, and the death is what
// to report. It returns the death, or nil.
func (w *initWatch) settle() error {
	t := time.NewTimer(settleFor)
	defer t.Stop()
	select {
	case <-w.ctx.Done():
	case <-t.C:
	}
	return w.cause()
}

// settleFor bounds settle.
const settleFor = 500 * time.Millisecond

// cause is the death that ended w's context, or nil.
func (w *initWatch) cause() error {
	var pe *PeerError
	if err := context.Cause(w.ctx); errors.As(err, &pe) {
		return pe
	}
	return nil
}

// stop ends the watch and waits for its goroutines.
func (w *initWatch) stop() {
	w.mu.Lock()
	stops := w.stops
	w.stops = nil
	w.mu.Unlock()
	for _, s := range stops {
		s()
	}
	w.cancel(nil)
	w.wg.Wait()
}

// ErrGoneDuringInit is the cause (in a *PeerError naming the rank) of a
// NewTCP that failed because a rank died or gave up during it.
var ErrGoneDuringInit = errors.New("left while the ranks were connecting (NewTCP/Init)")

// goneError is what a wait that saw rank left during Init returns to
// NewTCP, which makes it known (initWatch.gone).
type goneError struct {
	rank int
	why  string
}

func (e *goneError) Error() string { return fmt.Sprintf("rank %d left: %s", e.rank, e.why) }

func decodeAbort(v []byte) error {
	rs, why, _ := strings.Cut(string(v), " ")
	r, err := strconv.Atoi(rs)
	if err != nil {
		r = -1
	}
	why = strings.TrimPrefix(why, ErrGoneDuringInit.Error()+": ")
	return &PeerError{Rank: r, Err: fmt.Errorf("%w: %s", ErrGoneDuringInit, why)}
}

// watchConn watches rank r's connection without reading from it, until
// stop: a connection that ends (the peer died or gave up) is reported
// through gone. Data arriving shows the peer alive and ends the watch.
func (w *initWatch) watchConn(r int, conn net.Conn) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	done := make(chan struct{})
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(done)
		var ended bool
		var cause error
		var b [1]byte
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
				return false // wait until readable
			case err != nil:
				ended, cause = true, err
			case n == 0:
				ended = true
			}
			return true
		})
		if err == nil && ended {
			why := fmt.Sprintf("its connection to rank %d ended", w.rank)
			if cause != nil {
				why += ": " + cause.Error()
			}
			w.gone(r, why)
		}
	}()
	w.mu.Lock()
	w.stops = append(w.stops, func() {
		conn.SetReadDeadline(time.Now()) // ends rc.Read
		<-done
		conn.SetReadDeadline(time.Time{})
	})
	w.mu.Unlock()
}

// probe watches higher rank r's listener until connected(r) or the watch
// ends: once r has published its address, a refused connection there
// means r's process is gone (its listener is open until its NewTCP
// returns, and it cannot return before it has connected to this rank).
func (w *initWatch) probe(r int, records *rankRecords, connected func(int) bool) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rec, err := records.get(w.ctx, r)
		if err != nil {
			return
		}
		d := net.Dialer{Timeout: time.Second}
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-w.ctx.Done():
				return
			case <-t.C:
			}
			if connected(r) {
				return
			}
			c, err := d.DialContext(w.ctx, "tcp", rec.addr)
			if err == nil {
				c.Close()
				continue
			}
			if errors.Is(err, syscall.ECONNREFUSED) && !connected(r) {
				w.gone(r, fmt.Sprintf("its listener at %s refuses connections before it connected to rank %d: the process exited", rec.addr, w.rank))
				return
			}
		}
	}()
}

// segTag is the part of the name of every segment a rank creates that
// comes from its published key: any peer that connected to it knows the
// key, and so can remove the segments of a rank that died (removeSegs).
func segTag(key *ecdh.PublicKey) string { return "k" + fmt.Sprintf("%x", key.Bytes()[:8]) }

// removeSegs removes the files in /dev/shm of the ranks with these tags:
// the segments a rank that died during NewTCP may have left.
func removeSegs(tags []string) {
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "godist-") {
			continue
		}
		for _, t := range tags {
			if strings.Contains(n, "-"+t+"-") {
				os.Remove("/dev/shm/" + n)
				break
			}
		}
	}
}
