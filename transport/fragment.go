package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/godist/godist/internal/simd"
)

// Messages of fragMin bytes or more go through the slots in fragments
// (sendFragments), so that the receiver copies one out while the sender
// copies the next in: a message of n bytes then costs about one copy of n
// and one of a fragment, where whole it costs two copies of n. Fragments
// are a quarter of the message, within [fragMin/2, fragMax]: small enough
// to overlap, large enough that the header and wakeup of each are noise.
const (
	fragMin = 256 << 10
	fragMax = 1 << 20
)

func fragSize(n int) int { return min(max((n+3)/4, fragMin/2), fragMax) }

// sendFragments sends a message through consecutive shared-memory slots,
// one header per fragment (fragSize): the first fragment's payload starts
// with the message's length (8 bytes, little-endian), and every fragment
// but the last says more follow. The receiver frees each slot once it has
// copied the fragment out. l.mu is held: no other frame comes between the
// fragments.
func (l *tcpLink) sendFragments(ctx context.Context, h *Header, payload [][]byte) error {
	var length [8]byte
	binary.LittleEndian.PutUint64(length[:], uint64(totalLen(payload)))
	parts := append([][]byte{length[:]}, payload...)
	rest := totalLen(parts)
	size := fragSize(rest)
	first := true
	for rest > 0 {
		n := min(rest, size)
		i, err := l.shm.acquire(ctx)
		if err != nil {
			if first && ctx.Err() != nil {
				return notSent{err}
			}
			return err // fragments already sent: the stream is cut
		}
		var chunk [][]byte
		chunk, parts = splitParts(parts, n)
		f := Header{Kind: KindShmMessage, Key: h.Key, FP: h.FP, Len: int64(n), Slot: uint8(i), Frag: FragPart}
		copyParts(l.shm.seg.slot(i), chunk)
		l.shm.seg.state(i).Store(1)
		rest -= n
		if first {
			f.Frag |= FragFirst
		}
		if rest > 0 {
			f.Frag |= FragMore
		}
		f.encode(l.hdr[:])
		if err := l.write(ctx, net.Buffers{l.hdr[:]}); err != nil {
			if _, ok := err.(notSent); ok {
				l.shm.release(i)
				if first {
					return err
				}
				return err.(notSent).err // cut mid-message
			}
			return err
		}
		first = false
	}
	return nil
}

// splitParts returns the first n bytes of parts, and the rest.
func splitParts(parts [][]byte, n int) (head, rest [][]byte) {
	for n > 0 && len(parts) > 0 {
		p := parts[0]
		if len(p) <= n {
			head = append(head, p)
			n -= len(p)
			parts = parts[1:]
			continue
		}
		head = append(head, p[:n])
		parts = append([][]byte{p[n:]}, parts[1:]...)
		n = 0
	}
	return head, parts
}

// assembly is a fragmented message being received on one connection.
type assembly struct {
	active bool
	buf    []byte // the whole message; nil when skipped (over the limit)
	prefix []byte // a skipped message's first bytes
	off    int64
	total  int64
}

// fragment takes one fragment of a message sent through several slots
// (sendFragments) and hands the message on when it is whole. An error
// means the stream is unusable.
func (e *Endpoint) fragment(src int, h *Header, shm *shmSeg, asm *assembly) error {
	if h.Kind != KindShmMessage || h.Frag&FragPart == 0 || h.Frag&^(FragPart|FragMore|FragFirst) != 0 || shm == nil || int(h.Slot) >= shmSlots || h.Len > shmSlotSize || h.Len <= 0 {
		return fmt.Errorf("%w: %v frame (fragment flags %d, slot %d, %d bytes) where a fragment of a message was due", ErrFrame, h.Kind, h.Frag, h.Slot, h.Len)
	}
	first := h.Frag&FragFirst != 0
	if first == asm.active {
		return fmt.Errorf("%w: fragment out of order (first %v, a message under way %v)", ErrFrame, first, asm.active)
	}
	data := shm.slot(int(h.Slot))[:h.Len]
	defer shm.free(int(h.Slot)) // the sender may reuse it
	// The data carries no checksum: it crossed no wire (memPayload.slot).
	if first {
		if len(data) < 8 {
			return fmt.Errorf("%w: first fragment of %d bytes", ErrFrame, len(data))
		}
		total := binary.LittleEndian.Uint64(data)
		if total > MaxPayload || total+8 < fragMin {
			return fmt.Errorf("%w: fragmented message of %d bytes", ErrFrame, total)
		}
		*asm = assembly{active: true, total: int64(total)}
		e.mu.Lock()
		fn, limit := e.mu.message, e.mu.msgLimit
		e.mu.Unlock()
		if fn == nil || asm.total > limit {
			asm.prefix = append([]byte(nil), data[8:][:min(len(data)-8, MessagePrefix)]...)
		} else {
			asm.buf = e.peers.make(src).spare.get(int(total))
		}
		data = data[8:]
	}
	if asm.off+int64(len(data)) > asm.total {
		return fmt.Errorf("%w: fragments longer than the %d bytes announced", ErrFrame, asm.total)
	}
	if asm.buf != nil {
		// Non-temporal stores: the message is larger than the caches
		// want (fragMin and up), and its buffer is cold.
		simd.CopyStreaming(asm.buf[asm.off:asm.off+int64(len(data))], data)
	}
	asm.off += int64(len(data))
	if h.Frag&FragMore != 0 {
		return nil
	}
	if asm.off != asm.total {
		return fmt.Errorf("%w: fragments of %d bytes, %d announced", ErrFrame, asm.off, asm.total)
	}
	buf := asm.buf
	if buf == nil {
		buf = asm.prefix
	}
	size := asm.total
	*asm = assembly{}
	e.handMessage(src, h.Key, h.FP, buf, size)
	return nil
}
