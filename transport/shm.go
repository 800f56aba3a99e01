package transport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/godist/godist/internal/futex"
	"github.com/godist/godist/internal/shmfile"

	"github.com/godist/godist/store"
	"github.com/godist/godist/transport/internal/shmring"
)

// Same-host bulk path. Two ranks on one host still exchange every frame
// header over their TCP connection (order, matching, failure detection and
// desync checks are unchanged), but a large payload travels through a
// shared-memory segment instead of the kernel's loopback: the sender copies
// it into a slot, sends a header that names the slot, and the receiver
// copies it out and frees the slot. Two memory copies replace two kernel
// copies that run at a quarter of memcpy's speed here.
//
// One segment per direction and pair, created by the sender in /dev/shm
// with mode 0600 under a random name that travels through the job's
// (authenticated) store, and unlinked as soon as the receiver has mapped
// it: nothing is left behind, and only the job's processes hold it. When
// a rank dies before its segment is unlinked, the survivors remove it
// (the name carries the creator's published key, see setupShm); when the
// survivors die too (a launcher stops them), the launcher does (the name
// carries the creator's pid and process group, see shmfile).
const (
	shmSlots     = 4
	shmSlotSize  = 4 << 20
	shmHeader    = 4096 // slot states, one cache line each
	shmRingOff   = shmHeader + shmSlots*shmSlotSize
	shmRingCap   = 128 << 10 // frames up to 64 KiB (TCPOptions.ShmRing)
	shmSegment   = shmRingOff + shmring.HeaderSize + shmRingCap
	shmMinFrame  = 32 << 10 // smaller payloads go over TCP with the header
	shmMaxLocals = 8        // more ranks on a host than this: TCP only
)

// MaxSharedLocals is the most ranks of a host whose every pair shares
// memory from NewTCP on (with OnDemand too, connectHost): the same-host
// engine of the layers above may count on every pair of such a host.
const MaxSharedLocals = shmMaxLocals

// shmSeg is a mapped segment. ring, when set, is the frame ring after the
// slots (TCPOptions.ShmRing): the sender's end in its own segment, the
// receiver's in the peer's.
type shmSeg struct {
	mem  []byte
	ring *shmring.Ring
}

func (s *shmSeg) state(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[i*64]))
}

// waiting is set by a sender asleep on a slot's state word (acquire).
func (s *shmSeg) waiting() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[shmSlots*64]))
}

// free gives slot i back to the sender, waking it if it sleeps.
func (s *shmSeg) free(i int) {
	st := s.state(i)
	st.Store(0)
	if s.waiting().Load() != 0 {
		futex.Wake(st, 1)
	}
}

func (s *shmSeg) slot(i int) []byte {
	off := shmHeader + i*shmSlotSize
	return s.mem[off : off+shmSlotSize : off+shmSlotSize]
}

func (s *shmSeg) unmap() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

func mapSeg(f *os.File) (*shmSeg, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, shmSegment, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &shmSeg{mem: mem}, nil
}

// shmOut is the sending side of a segment: slots are used in turn, and
// the receiver frees them in the same order.
type shmOut struct {
	seg    *shmSeg
	next   int
	down   *atomic.Bool // the peer's connection failed
	closed atomic.Bool  // the link is closing
}

// acquire waits until the next slot is free and returns its index. It
// yields for slotSpin; then, while other goroutines of this process wait
// for the P, it sleeps through the runtime's timers (which hands them
// the P), else on the slot's state word until the receiver frees it
// (shmSeg.free), in naps that grow to slotNap, to look at the connection
// and ctx and to let this process's goroutines run: with nothing else
// to run, a sleep through the runtime's timers would last a millisecond
// here, whatever it asks for, where a slot frees in tens of microseconds.
func (o *shmOut) acquire(ctx context.Context) (int, error) {
	i := o.next
	st := o.seg.state(i)
	var start time.Time
	for st.Load() != 0 {
		if o.down.Load() || o.closed.Load() {
			return 0, fmt.Errorf("transport: no free shared-memory slot: the connection is closed")
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		waited := time.Since(start)
		if waited < slotSpin {
			runtime.Gosched()
			continue
		}
		if othersRun() {
			// This process has other goroutines to run (its reader among
			// them, which frees the peer's slots, and the peer may be
			// waiting for that to free this one): sleep through the
			// runtime, which gives them the P at once. A futex nap would
			// hold the P, and the runtime's monitor takes it back only
			// after up to 10 ms: RPC's 64 echoes of 1 MiB in flight,
			// whose senders and readers share one P a process, took
			// 56-107 ms a round that way, 25-53 ms this way.
			time.Sleep(20 * time.Microsecond)
			continue
		}
		w := o.seg.waiting()
		w.Store(1)
		if st.Load() != 0 { // the receiver sees waiting, or we see the slot free
			// Short naps, growing: a thread asleep in a futex keeps its
			// P until the runtime's monitor takes it back (20 µs to 10
			// ms), and this process's reader, which may be what the
			// peer waits on, needs one.
			futex.Wait(st, 1, min(max(waited/8, 20*time.Microsecond), slotNap))
		}
		w.Store(0)
		runtime.Gosched()
	}
	o.next = (i + 1) % shmSlots
	return i, nil
}

// idle reports whether the receiver has freed every slot: no message is
// in flight through them.
func (o *shmOut) idle() bool {
	for i := range shmSlots {
		if o.seg.state(i).Load() != 0 {
			return false
		}
	}
	return true
}

// othersRun reports whether other goroutines of this process were
// waiting for a P: a runtime.Gosched that lasts more than othersRan
// ran some (one that finds none returns in well under a microsecond).
func othersRun() bool {
	t := time.Now()
	runtime.Gosched()
	return time.Since(t) > othersRan
}

const othersRan = 2 * time.Microsecond

const (
	slotSpin = 200 * time.Microsecond
	slotNap  = time.Millisecond
)

// backoff waits a little for room the peer will make in a frame ring:
// yielding for the first 100 µs since *start (set on the first call),
// then sleeping (20 µs asked; the runtime's timers make it about 1 ms
// here, so a ring that stays full that long is a slow reader, not a
// burst).
func backoff(start *time.Time) {
	if start.IsZero() {
		*start = time.Now()
	}
	if time.Since(*start) < 100*time.Microsecond {
		runtime.Gosched()
	} else {
		time.Sleep(20 * time.Microsecond)
	}
}

// release gives back slot i, the last one acquired, unused.
func (o *shmOut) release(i int) {
	o.seg.state(i).Store(0)
	o.next = i
}

// hostID names this host's shared-memory domain: the boot id (same
// kernel) and /dev/shm's device and inode (same mount, so not two
// containers with separate ones).
func hostID() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/shm", &st); err != nil {
		return "", fmt.Errorf("stat /dev/shm: %w", err)
	}
	return fmt.Sprintf("%s/%d/%d", strings.TrimSpace(string(boot)), st.Dev, st.Ino), nil
}

// fallbackHostLabel names this host when hostID cannot (no /proc, no
// /dev/shm): by its hostname, so that ranks are still grouped by host,
// though never given shared memory.
func fallbackHostLabel() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "unknown"
	}
	return "hostname:" + name
}

// setupShm gives every pair of this rank's peers on the same host a
// segment in each direction, through the store: it publishes this rank's
// host id, creates a segment for each same-host peer and publishes its
// name, maps each peer's segment for this rank and says whether that
// worked, and keeps the outgoing segments whose receiver said yes. A pair
// that cannot share memory uses TCP alone; when shared memory is enabled,
// log hears which pairs and why. It returns the segments by peer (nil
// where none).
//
// A segment's file lives only while setupShm runs: the receiver unlinks
// it as soon as it has tried to map it, and the creator once the receiver
// has answered or setupShm fails. Its name carries tag, the creator's
// (peerTag gives a peer's), so that when the creator dies in between, the
// survivors remove it (removeSegs).
//
// An error (the store failed, or ctx ended: a peer died, or the
// deadline) fails the whole setup: a rank whose peers cannot finish it
// must not go on as if they had.
func setupShm(ctx context.Context, st store.Store, prefix string, rank, size int, enabled, ring bool, log *slog.Logger, tag string, peerTag func(int) string) (out, in []*shmSeg, hosts []string, err error) {
	out, in, hosts = make([]*shmSeg, size), make([]*shmSeg, size), make([]string, size)
	key := func(parts ...any) string {
		s := prefix + "transport/shm"
		for _, p := range parts {
			s += "/" + fmt.Sprint(p)
		}
		return s
	}
	tcpOnly := func(level slog.Level, why string, args ...any) {
		if enabled {
			log.Log(ctx, level, "transport: shared memory not used: "+why+"; large payloads go over TCP", append([]any{"rank", rank}, args...)...)
		}
	}
	// Every rank publishes its host label, shared memory or not (the
	// layers above group ranks by host with it: Endpoint.Hosts), behind
	// a flag saying whether it wants shared memory with same-host peers.
	label, err := hostID()
	if err != nil {
		tcpOnly(slog.LevelWarn, "cannot tell which peers share this host", "err", err)
		label = fallbackHostLabel()
	}
	id := ""
	if enabled && err == nil {
		id = label
	}
	flag := "0"
	if id != "" {
		flag = "1"
	}
	hosts[rank] = label
	wantRing := "0"
	if ring {
		wantRing = "1"
	}
	if err := st.Set(ctx, key("ring", rank), []byte(wantRing)); err != nil {
		return out, in, hosts, err
	}
	if err := st.Set(ctx, key("host", rank), []byte(flag+label)); err != nil {
		return out, in, hosts, err
	}
	// pairRing[p]: frames between this rank and p go through the rings
	// of their segments (both asked for it).
	pairRing := make([]bool, size)
	var same, elsewhere, off []int
	for p := range size {
		if p == rank {
			continue
		}
		if ring {
			v, err := st.Get(ctx, key("ring", p))
			if err != nil {
				return out, in, hosts, err
			}
			pairRing[p] = string(v) == "1"
		}
		v, err := st.Get(ctx, key("host", p))
		if err != nil {
			return out, in, hosts, err
		}
		if len(v) == 0 {
			return out, in, hosts, fmt.Errorf("rank %d published an empty host label (a godist build from before host labels?)", p)
		}
		peerOn, peerLabel := v[0] == '1', string(v[1:])
		hosts[p] = peerLabel
		switch {
		case id == "":
		case !peerOn:
			off = append(off, p)
		case peerLabel == id:
			same = append(same, p)
		default:
			elsewhere = append(elsewhere, p)
		}
	}
	if len(off) > 0 {
		tcpOnly(slog.LevelInfo, "peers with it off or unavailable", "peers", off)
	}
	if len(elsewhere) > 0 {
		tcpOnly(slog.LevelInfo, "peers on other hosts", "peers", elsewhere)
	}
	if len(same)+1 > shmMaxLocals {
		tcpOnly(slog.LevelInfo, fmt.Sprintf("more than %d ranks on this host", shmMaxLocals), "peers", same)
		same = nil
	}
	// Create and publish this rank's segments.
	files := map[int]*os.File{}
	defer func() {
		// Whatever happened, no file of this rank outlives setupShm.
		for _, f := range files {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	for _, p := range same {
		name := ""
		f, err := createSeg(tag, rank, p)
		if err == nil {
			var seg *shmSeg
			if seg, err = mapSeg(f); err == nil && pairRing[p] {
				// Laid out before the peer learns the name.
				if seg.ring, err = shmring.Init(seg.mem[shmRingOff:]); err != nil {
					seg.unmap()
				}
			}
			if err == nil {
				files[p], out[p], name = f, seg, f.Name()
			} else {
				f.Close()
				os.Remove(f.Name())
			}
		}
		if err != nil {
			tcpOnly(slog.LevelWarn, "cannot create a segment in /dev/shm", "peer", p, "err", err)
		}
		if err := st.Set(ctx, key("seg", rank, p), []byte(name)); err != nil {
			return out, in, hosts, err
		}
	}
	// Map the peers' segments for this rank, and unlink each at once.
	for _, p := range same {
		v, err := st.Get(ctx, key("seg", p, rank))
		if err != nil {
			return out, in, hosts, err
		}
		ok := "0"
		if name := string(v); name != "" {
			if !isSegName(name, peerTag(p)) {
				err = fmt.Errorf("%q is not a segment of rank %d", name, p)
			} else {
				var f *os.File
				if f, err = os.OpenFile(name, os.O_RDWR, 0); err == nil {
					var seg *shmSeg
					if seg, err = mapSeg(f); err == nil && pairRing[p] {
						if seg.ring, err = shmring.Attach(seg.mem[shmRingOff:]); err != nil {
							seg.unmap()
						}
					}
					if err == nil {
						in[p], ok = seg, "1"
					}
					f.Close()
				}
				os.Remove(name) // mapped or not, nobody else needs the name
			}
			if err != nil {
				tcpOnly(slog.LevelWarn, "cannot map the peer's segment", "peer", p, "err", err)
			}
		}
		if err := st.Set(ctx, key("ok", p, rank), []byte(ok)); err != nil {
			return out, in, hosts, err
		}
	}
	// Keep the segments whose receiver mapped them.
	for _, p := range same {
		if out[p] == nil {
			continue
		}
		v, err := st.Get(ctx, key("ok", rank, p))
		if err != nil {
			return out, in, hosts, err
		}
		f := files[p]
		f.Close()
		os.Remove(f.Name())
		delete(files, p)
		if string(v) != "1" {
			tcpOnly(slog.LevelInfo, "the peer could not map this rank's segment", "peer", p)
			out[p].unmap()
			out[p] = nil
		}
	}
	return out, in, hosts, nil
}

// closeSegs unmaps the segments of a setup that failed.
func closeSegs(out, in []*shmSeg) {
	for _, s := range append(out, in...) {
		s.unmap()
	}
}

// isSegName reports whether name is a segment file created by the rank
// whose segTag is tag: a rank maps and removes no other file.
func isSegName(name, tag string) bool {
	base := filepath.Base(name)
	return tag != "" && filepath.Dir(name) == "/dev/shm" && strings.HasPrefix(base, "godist-") && strings.Contains(base, "-"+tag+"-")
}

func createSeg(tag string, from, to int) (*os.File, error) {
	return createFile(tag+"-"+strconv.Itoa(from)+"-"+strconv.Itoa(to), shmSegment)
}

// shmPrefix is how the names of this process's files in /dev/shm begin:
// "godist-", the process id and its process group's (shmfile.Prefix), so
// that a file left by a process that was killed before it could unlink it
// names its owner, and the launcher that started it removes it.
func shmPrefix() string { return shmfile.Prefix() }

// createFile creates a file of size bytes in /dev/shm, mode 0600, under a
// name of shmPrefix, a random part and tag.
func createFile(tag string, size int64) (*os.File, error) { return shmfile.Create(tag, size) }

// copyParts copies the parts into a slot (dst) back to back, in blocks
// under 1 MiB: the runtime's copy switches to non-temporal stores at 1
// MiB, which would send the slot to memory, where the receiver, reading
// it next, wants it in the cache the two CPUs share.
func copyParts(dst []byte, parts [][]byte) {
	off := 0
	for _, p := range parts {
		for len(p) > 0 {
			n := copy(dst[off:], p[:min(len(p), slotBlock)])
			off += n
			p = p[n:]
		}
	}
}

const slotBlock = 256 << 10
