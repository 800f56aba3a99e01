package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/godist/godist/transport/internal/shmring"
)

// tcpLink writes frames to one connection.
type tcpLink struct {
	mu   sync.Mutex // one frame at a time
	conn net.Conn
	raw  syscall.RawConn // conn's descriptor; nil when conn is not a socket
	hdr  [HeaderSize]byte
	bufs net.Buffers  // the frame being written (reused)
	iov  []unix.Iovec // bufs for writev (reused)
	// writev is the raw write tryWritev makes, made once (a closure made
	// at each write would be allocated at each write); wn and werrno are
	// its results. l.mu is held.
	writev func(fd uintptr) bool
	wn     uintptr
	werrno syscall.Errno
	shm    *shmOut       // same-host peer's segment, or nil
	ring   *shmring.Ring // the frame ring in it (TCPOptions.ShmRing), or nil
}

func newTCPLink(conn net.Conn) *tcpLink {
	l := &tcpLink{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			l.raw = rc
		}
	}
	l.writev = func(fd uintptr) bool {
		for {
			l.wn, _, l.werrno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&l.iov[0])), uintptr(len(l.iov)))
			if l.werrno != syscall.EINTR {
				return true // never wait here
			}
		}
	}
	return l
}

func (l *tcpLink) send(ctx context.Context, h *Header, payload [][]byte) (err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return notSent{err}
	}
	n := totalLen(payload)
	if l.shm != nil && h.Kind == KindMessage && n >= fragMin && (n > shmSlotSize || l.shm.idle()) {
		// In fragments, a message's copies in and out overlap; but while
		// the receiver still holds slots (messages in flight) a message
		// that fits one goes whole: the copies of successive messages
		// overlap as well, and one message does not take every slot.
		return l.sendFragments(ctx, h, payload)
	}
	if l.shm != nil && (h.Kind == KindData || h.Kind == KindMessage) {
		if n >= shmMinFrame && n <= shmSlotSize {
			// The payload goes through the next shared-memory slot; the
			// header, naming the slot, goes over TCP.
			i, aerr := l.shm.acquire(ctx)
			if aerr != nil {
				if ctx.Err() != nil {
					return notSent{aerr}
				}
				return aerr
			}
			copyParts(l.shm.seg.slot(i), payload) // no checksum (memPayload.slot)
			h.CRC = 0
			l.shm.seg.state(i).Store(1)
			h.Slot = uint8(i)
			if h.Kind == KindData {
				h.Kind = KindShmData
			} else {
				h.Kind = KindShmMessage
			}
			payload = nil
			defer func() {
				if _, ok := err.(notSent); ok {
					l.shm.release(i) // the header never left: the slot is free again
				}
			}()
		}
	}
	if h.Kind != KindShmData && h.Kind != KindShmMessage {
		h.CRC = Checksum(payload...)
	}
	h.encode(l.hdr[:])
	bufs := append(l.bufs[:0], l.hdr[:])
	for _, p := range payload {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	l.bufs = bufs
	defer clear(l.bufs) // keep no tensor alive
	return l.write(ctx, bufs)
}

// write sends bufs, one frame, to the peer: through the ring when the
// link has one (a frame too large for it goes on the socket after a
// marker in the ring that tells the reader to read it there, so the order
// holds), else on the socket. l.mu is held.
func (l *tcpLink) write(ctx context.Context, bufs net.Buffers) error {
	if l.ring == nil {
		return l.writeAll(ctx, bufs)
	}
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if n <= l.ring.MaxFrame() {
		return l.ringPush(ctx, bufs)
	}
	if err := l.ringPush(ctx, nil); err != nil { // the marker: an empty frame
		return err
	}
	if err := l.writeAll(ctx, bufs); err != nil {
		if ns, ok := err.(notSent); ok {
			return ns.err // the marker is out: the stream is cut
		}
		return err
	}
	return nil
}

// ringPush pushes one frame into the ring, waiting while it is full, and
// wakes the reader when it had stopped polling. It returns notSent when
// ctx ended before the frame went in.
func (l *tcpLink) ringPush(ctx context.Context, parts [][]byte) error {
	var start time.Time
	for {
		wake, err := l.ring.TryPush(parts...)
		if err == nil {
			if wake {
				// A wakeup must not be cancelled: the frame is in.
				if err := l.writeAll(context.Background(), net.Buffers{[]byte{0}}); err != nil {
					return fmt.Errorf("transport: waking the peer: %w", err)
				}
			}
			return nil
		}
		if !errors.Is(err, shmring.ErrFull) {
			return err
		}
		if l.shm.down.Load() || l.shm.closed.Load() {
			return fmt.Errorf("transport: the frame ring is full and the connection is closed")
		}
		if err := ctx.Err(); err != nil {
			return notSent{err}
		}
		backoff(&start)
	}
}

// writeAll writes bufs as one frame. l.mu is held. It returns notSent when
// ctx ended before any byte left.
func (l *tcpLink) writeAll(ctx context.Context, bufs net.Buffers) error {
	// Most frames fit in the socket's buffer: one writev that cannot block
	// needs no cancellation. Only the rest of a frame that does not fit
	// waits on the socket, and only that wait watches ctx.
	n, err := l.tryWritev(bufs)
	if err != nil {
		return err
	}
	started := n > 0
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			break
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) == 0 {
		return nil
	}
	return l.writeRest(ctx, bufs, started)
}

// writeRest writes what of a frame did not fit in the socket's buffer,
// waiting for the socket and watching ctx (writeAll's slow path, apart so
// that the fast path's buffer list stays on its stack).
func (l *tcpLink) writeRest(ctx context.Context, bufs net.Buffers, started bool) error {
	if ctx.Done() != nil {
		// ctx's deadline, if any, closes Done too: then the write stops.
		// (Setting the socket's write deadline on every send instead costs
		// two timer updates per frame, a third of a small message's time.)
		var mu sync.Mutex
		finished := false
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				l.conn.SetWriteDeadline(time.Now())
			}
		})
		defer func() {
			mu.Lock()
			finished = true
			mu.Unlock()
			if !stop() {
				l.conn.SetWriteDeadline(time.Time{}) // it fired: undo it
			}
		}()
	}
	m, err := bufs.WriteTo(l.conn) // writev: header and tensor bytes, no copy
	if err != nil && !started && m == 0 && ctx.Err() != nil {
		return notSent{ctx.Err()}
	}
	return err
}

// tryWritev makes one writev of bufs that does not wait for the socket,
// and returns how many bytes it took (0 when the socket buffer is full).
func (l *tcpLink) tryWritev(bufs [][]byte) (int, error) {
	if l.raw == nil {
		return 0, nil
	}
	l.iov = l.iov[:0]
	for _, b := range bufs {
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		l.iov = append(l.iov, v)
	}
	defer clear(l.iov)
	err := l.raw.Write(l.writev)
	n, errno := l.wn, l.werrno
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, os.NewSyscallError("writev", errno)
	}
	return int(n), nil
}

func (l *tcpLink) close() error {
	if l.shm != nil {
		l.shm.closed.Store(true)
	}
	err := l.conn.Close()
	l.mu.Lock()
	if l.shm != nil {
		l.shm.seg.unmap()
		l.shm, l.ring = nil, nil
	}
	l.mu.Unlock()
	return err
}
