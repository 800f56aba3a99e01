package transport

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Regions: memory a rank shares with its same-host peers.
//
// A region is a file in /dev/shm (mode 0600, random name) that the peers
// map read-write; its name travels among a group's members (dist's
// NewSharedTensor), and the file is unlinked as soon as they have mapped
// it. A rank killed before that leaves its file to its launcher, which
// removes the files of the workers it started once they end (the name
// carries the creator's pid and process group, see shmfile). dist's shared-memory all-reduce reads the members' inputs straight
// out of each other's regions and writes its results into them.
//
// (A send whose payload lay in a region once went by reference too, the
// receiver reading it out of the sender's memory while the send waited
// for its ack. Measured against the shared-memory slots where
// it still applied, all-reduces of 32-128 KiB pieces of shared tensors,
// world 2: 32 KiB 15.3 against 10.5 µs, 64 KiB 17.4 against 14.9, 96 KiB
// 23.6 against 23.0, 120 KiB 26.7 against 26.1, three interleaved rounds
// each. It never won, and was removed.)

// PeerMemory is what an endpoint offers when some of its peers share this
// host's memory (TCP with shared memory on): regions of its own that they
// map, and theirs mapped here. Ask for it with Endpoint.PeerMemory.
type PeerMemory interface {
	// SharesMemoryWith reports whether peer's regions can be mapped here.
	SharesMemoryWith(peer int) bool
	// NewRegion maps n bytes that same-host peers can map with MapRegion.
	NewRegion(n int) (*Region, error)
	// MapRegion maps peer's region id (n bytes, file name) until the
	// connection to peer ends or UnmapRegion.
	MapRegion(peer int, id uint8, name string, n int) error
	// UnmapRegion releases peer's region id if it is mapped.
	UnmapRegion(peer int, id uint8)
	// UsePeerRegions runs fn, which may read and write the peers' mapped
	// regions that region returns (nil when not mapped) until fn returns.
	UsePeerRegions(fn func(region func(peer int, id uint8) []byte) error) error
	// LockPeerRegions and UnlockPeerRegions are UsePeerRegions without a
	// function (for a hot path that must not allocate one): between them
	// PeerRegion's memory stays mapped.
	LockPeerRegions()
	UnlockPeerRegions()
	PeerRegion(peer int, id uint8) []byte
}

var _ PeerMemory = (*Endpoint)(nil)

// PeerMemory returns the endpoint's peer memory, and whether any peer
// shares this host's memory (with connections on demand: whether any
// peer is on this host, shared memory on; SharesMemoryWith connects).
func (e *Endpoint) PeerMemory() (PeerMemory, bool) {
	if e.od != nil {
		if !e.od.shm {
			return nil, false
		}
		for p := range e.size {
			if p != e.rank && e.hosts[p] == e.hosts[e.rank] && e.hosts[p] != "" {
				return e, true
			}
		}
		return nil, false
	}
	for p := range e.size {
		if e.SharesMemoryWith(p) {
			return e, true
		}
	}
	return nil, false
}

// maxRegions bounds the regions of one endpoint (ids fit a byte).
const maxRegions = 255

// Region is memory a rank shares with its same-host peers.
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
// MapRegion. It fails when the endpoint has no same-host peer or runs out
// of region ids.
func (e *Endpoint) NewRegion(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("transport: region of %d bytes", n)
	}
	if _, ok := e.PeerMemory(); !ok {
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

// Close unmaps the region. Nothing may use its memory afterwards. It
// waits for UsePeerRegions calls in progress, which may be reading or
// writing it (dist's shared all-reduce works in its own region there
// too). Peers keep their mappings until their connection to this rank
// closes or they UnmapRegion.
func (r *Region) Close() {
	r.once.Do(func() {
		r.Unlink()
		r.e.regionUse.Lock()
		defer r.e.regionUse.Unlock()
		unix.Munmap(r.mem)
		r.mem = nil
	})
}

// SharesMemoryWith reports whether this rank moves large payloads to peer
// through shared memory (a same-host peer whose segments were set up).
// With connections on demand it connects to a same-host peer first.
func (e *Endpoint) SharesMemoryWith(peer int) bool {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return false
	}
	if e.od != nil && e.od.shm && e.hosts[peer] == e.hosts[e.rank] && !e.Connected(peer) {
		_, _ = e.linkTo(peer)
	}
	l := e.tcpLinkOf(peer)
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shm != nil
}

// MapRegion maps peer's region id (n bytes, file name), for
// UsePeerRegions. The mapping lasts until the connection to peer ends or
// UnmapRegion.
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

// LockPeerRegions keeps the peers' mapped regions mapped until
// UnlockPeerRegions (see UsePeerRegions).
func (e *Endpoint) LockPeerRegions() { e.regionUse.RLock() }

// UnlockPeerRegions ends LockPeerRegions.
func (e *Endpoint) UnlockPeerRegions() { e.regionUse.RUnlock() }

// PeerRegion returns peer's region id as MapRegion mapped it, or nil; use
// it only between LockPeerRegions and UnlockPeerRegions.
func (e *Endpoint) PeerRegion(peer int, id uint8) []byte { return e.peerRegion(peer, id) }

// unmapPeerRegions releases every peer's regions (Close). They stay
// mapped when a peer's connection ends before: a peer that finished a
// call and closed may have left in its region what this rank has still
// to read (dist's control blocks), and a mapping of a file outlives the
// process that made it, so reading a dead peer's region is safe.
func (e *Endpoint) unmapPeerRegions() {
	e.regionUse.Lock()
	defer e.regionUse.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, mem := range e.mu.regions {
		unix.Munmap(mem)
		delete(e.mu.regions, k)
	}
}
