package transport

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Lent payloads: zero-copy sends between same-host peers.
//
// A payload that lies in a Region, memory this rank shares with a peer,
// is not copied into a shared-memory slot: the frame header says where it
// lies (KindLentData, the region's id in the slot byte, then a 16-byte
// descriptor on the stream: offset and ack sequence), the peer's reader
// reduces or copies it straight out of the sender's memory, and then
// publishes the sequence number in the pair's segment. The send returns
// only then, so that the sender may write the bytes again, as after any
// Send. The payload CRC still travels in the header (the sender computes
// it, reading bytes that are usually in its cache): the receiver checks
// what it read, so bytes changed under it are an error, never data.
//
// Why: a DDP bucket's all-reduce between two ranks of one host spent
// 6.4% of the training processes' time in the copy into the slot (writes
// to lines the other core had read), more than any other part of the
// exchange.
//
// A region is a file in /dev/shm (mode 0600, random name) that the peers
// map (lent payloads only read it; dist's shared all-reduce also writes
// its results into the peers' copies); the name travels among the group's members (dist's
// NewSharedTensor) and the file is unlinked as soon as they have mapped it.

// lentDescSize is the descriptor after a KindLentData header.
const lentDescSize = 16

// lentAckLine is the cache line of a pair's segment header where the
// receiver publishes the last lent frame it consumed.
const lentAckLine = shmSlots

// lentSpin is how long a lent send polls for its ack before it parks.
var lentSpin = 10 * time.Microsecond

// maxRegions bounds the regions of one endpoint (ids fit the slot byte).
const maxRegions = 255

// Region is memory a rank shares with its same-host peers so that its
// sends from there go by reference (see the comment above).
type Region struct {
	e    *Endpoint
	id   uint8
	mem  []byte
	name string // the file, until Unlink
	once sync.Once
}

// ID is the region's number among this endpoint's regions.
func (r *Region) ID() uint8 { return r.id }

// Name is the file the peers map, or "" once unlinked.
func (r *Region) Name() string { return r.name }

// Bytes is the region's memory.
func (r *Region) Bytes() []byte { return r.mem }

// NewRegion maps n bytes of memory that same-host peers can map with
// MapRegion. It fails when the endpoint has no same-host peer (then
// nothing would read it in place) or runs out of region ids.
func (e *Endpoint) NewRegion(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("transport: region of %d bytes", n)
	}
	shares := false
	for p := range e.size {
		shares = shares || e.SharesMemoryWith(p)
	}
	if !shares {
		return nil, fmt.Errorf("transport: rank %d shares memory with no peer", e.rank)
	}
	e.mu.Lock()
	if e.mu.nextRegion >= maxRegions {
		e.mu.Unlock()
		return nil, fmt.Errorf("transport: rank %d has made %d shared regions, the most an endpoint can", e.rank, maxRegions)
	}
	e.mu.nextRegion++
	id := uint8(e.mu.nextRegion)
	e.mu.Unlock()
	f, err := createFile(fmt.Sprintf("region-%d-%d", e.rank, id), int64(n))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("transport: map region: %w", err)
	}
	return &Region{e: e, id: id, mem: mem, name: f.Name()}, nil
}

// Unlink removes the region's file: call it once every peer that will map
// it has (the mappings stay).
func (r *Region) Unlink() {
	if r.name != "" {
		os.Remove(r.name)
		r.name = ""
	}
}

// LendTo lets sends to peer whose payload lies within the region go by
// reference. The peer must have mapped the region (MapRegion).
func (r *Region) LendTo(peer int) error {
	l, ok := r.e.links[peer].(*tcpLink)
	if !ok || !r.e.SharesMemoryWith(peer) {
		return fmt.Errorf("transport: rank %d shares no memory with rank %d", r.e.rank, peer)
	}
	l.mu.Lock()
	l.lent = append(l.lent, r)
	l.mu.Unlock()
	return nil
}

// Close stops lending the region and unmaps it. Nothing may use its
// memory afterwards. Peers keep their mappings until their connection to
// this rank closes.
func (r *Region) Close() {
	r.once.Do(func() {
		r.Unlink()
		for _, l := range r.e.links {
			if l, ok := l.(*tcpLink); ok {
				l.mu.Lock()
				for i, q := range l.lent {
					if q == r {
						l.lent = append(l.lent[:i], l.lent[i+1:]...)
						break
					}
				}
				l.mu.Unlock()
			}
		}
		unix.Munmap(r.mem)
		r.mem = nil
	})
}

// SharesMemoryWith reports whether this rank moves large payloads to peer
// through shared memory (a same-host peer whose segments were set up).
func (e *Endpoint) SharesMemoryWith(peer int) bool {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return false
	}
	l, ok := e.links[peer].(*tcpLink)
	if !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shm != nil
}

// LentSends counts the sends so far whose payload went by reference.
func (e *Endpoint) LentSends() int64 {
	var n int64
	for _, l := range e.links {
		if l, ok := l.(*tcpLink); ok {
			n += l.lentFrames.Load()
		}
	}
	return n
}

// MapRegion maps peer's region id (n bytes, file name), for reading the
// payloads peer lends from it and for UsePeerRegions. The mapping lasts
// until the connection to peer ends.
func (e *Endpoint) MapRegion(peer int, id uint8, name string, n int) error {
	if !e.SharesMemoryWith(peer) {
		return fmt.Errorf("transport: rank %d shares no memory with rank %d", e.rank, peer)
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("transport: map rank %d's region %d: %w", peer, id, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != int64(n) {
		return fmt.Errorf("transport: rank %d's region %d (%s) is not %d bytes", peer, id, name, n)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("transport: map rank %d's region %d: %w", peer, id, err)
	}
	e.regionUse.Lock() // a region replaced below is unmapped
	defer e.regionUse.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed || e.mu.down[peer] != nil {
		unix.Munmap(mem)
		return fmt.Errorf("transport: rank %d: connection to rank %d is down", e.rank, peer)
	}
	if e.mu.regions == nil {
		e.mu.regions = map[regionKey][]byte{}
	}
	if old := e.mu.regions[regionKey{peer, id}]; old != nil {
		unix.Munmap(old)
	}
	e.mu.regions[regionKey{peer, id}] = mem
	return nil
}

type regionKey struct {
	peer int
	id   uint8
}

// peerRegion returns peer's mapped region id, or nil.
func (e *Endpoint) peerRegion(peer int, id uint8) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.regions[regionKey{peer, id}]
}

// UnmapRegion releases peer's region id if this endpoint mapped it.
func (e *Endpoint) UnmapRegion(peer int, id uint8) {
	e.regionUse.Lock()
	defer e.regionUse.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if mem := e.mu.regions[regionKey{peer, id}]; mem != nil {
		unix.Munmap(mem)
		delete(e.mu.regions, regionKey{peer, id})
	}
}

// UsePeerRegions runs fn, which may read and write the regions of peers
// that region returns (peer's region id as MapRegion mapped it, or nil
// when it is not mapped: the peer's connection has ended, say) until fn
// returns: they stay mapped meanwhile, even if a peer's connection ends.
func (e *Endpoint) UsePeerRegions(fn func(region func(peer int, id uint8) []byte) error) error {
	e.regionUse.RLock()
	defer e.regionUse.RUnlock()
	return fn(e.peerRegion)
}

// unmapPeerRegions releases peer's regions (its connection has ended and
// its reader, their only user, has stopped).
func (e *Endpoint) unmapPeerRegions(peer int) {
	e.regionUse.Lock()
	defer e.regionUse.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, mem := range e.mu.regions {
		if k.peer == peer {
			unix.Munmap(mem)
			delete(e.mu.regions, k)
		}
	}
}

// lendable returns the region of l's lent ones that holds all of payload,
// and payload's offset in it.
func (l *tcpLink) lendable(payload [][]byte) (*Region, int, bool) {
	if len(l.lent) == 0 || len(payload) != 1 || len(payload[0]) < shmMinFrame {
		return nil, 0, false
	}
	p := payload[0]
	start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, r := range l.lent {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
		if start >= base && start+uintptr(len(p)) <= base+uintptr(len(r.mem)) {
			return r, int(start - base), true
		}
	}
	return nil, 0, false
}

// sendLent writes a KindLentData frame for payload p, which lies at off in
// region r, and waits until the peer has consumed it. l.mu is held, and
// stays held through the wait: close unmaps the segment holding the ack
// word under l.mu (after setting closed, which ends the wait), and the
// frames to one peer go one at a time anyway.
func (l *tcpLink) sendLent(ctx context.Context, h *Header, r *Region, off int, p []byte) error {
	l.lentSeq++
	seq := l.lentSeq
	h.Kind, h.Slot, h.CRC = KindLentData, r.id, Checksum(p)
	h.encode(l.hdr[:])
	var desc [lentDescSize]byte
	binary.LittleEndian.PutUint64(desc[0:], uint64(off))
	binary.LittleEndian.PutUint64(desc[8:], uint64(seq))
	if err := l.writeAll(ctx, [][]byte{l.hdr[:], desc[:]}); err != nil {
		return err
	}
	l.lentFrames.Add(1)
	// Wait for the ack: the peer's reader consumes the frame as soon as
	// it runs (into the posted receive, or a copy kept for a later one).
	ack := l.shm.seg.state(lentAckLine)
	var start time.Time
	for int32(ack.Load()-uint32(seq)) < 0 {
		if l.shm.down.Load() || l.shm.closed.Load() {
			return fmt.Errorf("transport: lent payload not consumed: the connection is closed")
		}
		if err := ctx.Err(); err != nil {
			return err // the frame is out: the caller marks the peer down
		}
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start) < lentSpin {
			runtime.Gosched()
		} else {
			// Park, so that the scheduler polls the network: the peer's
			// frames, which this rank's readers must consume for the peer
			// to go on, wake them only through the poller, which a
			// goroutine spinning through Gosched keeps from running.
			time.Sleep(time.Microsecond)
		}
	}
	return nil
}

// readLent reads a KindLentData frame's descriptor from in and returns the
// payload's bytes in peer's region, and the ack sequence to publish.
func (e *Endpoint) readLent(peer int, h *Header, in *streamPayload) ([]byte, uint32, error) {
	var desc [lentDescSize]byte
	if err := in.read(desc[:]); err != nil {
		return nil, 0, err
	}
	off := binary.LittleEndian.Uint64(desc[0:])
	seq := uint32(binary.LittleEndian.Uint64(desc[8:]))
	mem := e.peerRegion(peer, h.Slot)
	if mem == nil {
		return nil, 0, fmt.Errorf("%w: lent payload in region %d of rank %d, which this rank has not mapped", ErrFrame, h.Slot, peer)
	}
	if off > uint64(len(mem)) || uint64(h.Len) > uint64(len(mem))-off {
		return nil, 0, fmt.Errorf("%w: lent payload [%d, +%d) outside rank %d's region %d of %d bytes", ErrFrame, off, h.Len, peer, h.Slot, len(mem))
	}
	return mem[off : off+uint64(h.Len)], seq, nil
}
