package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/godist/godist/tensor"
)

// The flight recorder: every group keeps its last calls (collectives,
// sends, receives) in a fixed ring, written by the call-state machine
// under the lock the group takes for every call anyway, so that recording
// costs a copy of a few words per call and no allocation. The ring is
// read on request (FlightRecord, DumpFlight), written to a file when the
// group fails with a timeout or a desync, and on SIGUSR1 once asked
// (DumpOnSignal, Options.DumpOnSignal, GODIST_FLIGHT_SIGNAL=1, which
// godist run sets). WriteChromeTrace turns records into a timeline.

// DefaultFlightEntries is how many calls each group remembers unless
// Options.FlightRecorder says otherwise.
const DefaultFlightEntries = 256

// maxFlightEntries bounds Options.FlightRecorder.
const maxFlightEntries = 1 << 20

// FlightState is the state of a recorded call.
type FlightState string

const (
	FlightRunning FlightState = "running" // in flight, not blocked on a peer
	FlightWaiting FlightState = "waiting" // in flight, blocked on a receive from WaitingOn
	FlightDone    FlightState = "done"
	FlightFailed  FlightState = "failed"
)

// FlightEntry is one call of a group as the flight recorder kept it.
type FlightEntry struct {
	Group uint32 `json:"group"`
	// Seq is a collective's sequence number in its group (the same on
	// every member), or a send's number in its stream (peer, tag); 0 for
	// a receive.
	Seq      uint64 `json:"seq"`
	Op       string `json:"op"` // "all_reduce", "broadcast", ..., "send", "recv"
	DType    string `json:"dtype,omitempty"`
	Count    int    `json:"count"` // elements (per rank, where the op has a per-rank count)
	Bytes    int64  `json:"bytes"` // Count times the dtype's size
	Root     int    `json:"root"`  // group rank of the root, -1 when the op has none
	ReduceOp string `json:"reduce_op,omitempty"`
	// Peer is a send's or receive's peer (global rank; -1 for a
	// collective or a receive from any source) and Tag its tag.
	Peer int `json:"peer"`
	Tag  int `json:"tag,omitempty"`
	// State is the call's state when the record was read; WaitingOn the
	// global rank it is blocked on (FlightWaiting), else -1.
	State     FlightState `json:"state"`
	WaitingOn int         `json:"waiting_on"`
	Start     time.Time   `json:"start"`
	End       time.Time   `json:"end,omitzero"` // zero while in flight
	Error     string      `json:"error,omitempty"`
}

// Duration is how long the call took, or has taken by now when it is
// still in flight.
func (e FlightEntry) Duration(now time.Time) time.Duration {
	if e.End.IsZero() {
		return now.Sub(e.Start)
	}
	return e.End.Sub(e.Start)
}

// flightRing is the last calls of one group, oldest overwritten first.
// A nil ring records nothing. It is the callState's and shares its lock.
type flightRing struct {
	// buf grows to size slots as calls come (a job of thousands of
	// goroutine ranks, most of whose groups make few calls, would
	// otherwise hold size slots per group from the start).
	buf  []flightSlot
	size uint64
	n    uint64 // calls entered so far; call k is in buf[k%size]
}

// flightSlot is one call in the ring: what the callState knows of it,
// copied, so that nothing is allocated per call.
type flightSlot struct {
	id       callID
	kind     callKind
	c        call
	seq      uint64
	peer     int // global rank of a point-to-point peer, or -1
	tag      uint32
	waitPeer int // global rank the call is blocked on, or -1
	done     bool
	start    time.Time
	end      time.Time
	err      error
}

func newFlightRing(size int) *flightRing {
	if size <= 0 {
		return nil
	}
	return &flightRing{size: uint64(size)}
}

// begin enters call id (r) begun at now; ranks maps group ranks to
// global ones. Every call of the callState enters the ring, in the order
// of their ids (1, 2, ...), so call id sits in buf[(id-1)%len(buf)]
// until a later one takes its place.
func (f *flightRing) begin(id callID, r *callRec, ranks []int, now time.Time) {
	if f == nil {
		return
	}
	peer := -1
	if r.kind != kindCollective && r.peer >= 0 && r.peer < len(ranks) {
		peer = ranks[r.peer]
	}
	i := uint64(id-1) % f.size
	for uint64(len(f.buf)) <= i {
		f.buf = append(f.buf, flightSlot{})
	}
	f.buf[i] = flightSlot{id: id, kind: r.kind, c: r.c, seq: r.seq, peer: peer, tag: r.tag, waitPeer: -1, start: now}
	f.n++
}

// slot is call id's slot, or nil when it has been overwritten.
func (f *flightRing) slot(id callID) *flightSlot {
	if f == nil || id == 0 {
		return nil
	}
	i := uint64(id-1) % f.size
	if i < uint64(len(f.buf)) && f.buf[i].id == id {
		return &f.buf[i]
	}
	return nil
}

// wait records whom call id is blocked on now (-1: nobody).
func (f *flightRing) wait(id callID, peer int) {
	if sl := f.slot(id); sl != nil {
		sl.waitPeer = peer
	}
}

// end records call id's end at now with err (nil: success).
func (f *flightRing) end(id callID, now time.Time, err error) {
	if sl := f.slot(id); sl != nil {
		sl.done, sl.end, sl.err, sl.waitPeer = true, now, err, -1
	}
}

// entries returns the ring's calls, oldest first, as group's.
func (f *flightRing) entries(group uint32) []FlightEntry {
	if f == nil {
		return nil
	}
	size := f.size
	first := uint64(0)
	if f.n > size {
		first = f.n - size
	}
	out := make([]FlightEntry, 0, f.n-first)
	for k := first; k < f.n; k++ {
		out = append(out, f.buf[k%size].entry(group))
	}
	return out
}

func (sl *flightSlot) entry(group uint32) FlightEntry {
	e := FlightEntry{
		Group: group, Seq: sl.seq, Op: sl.c.op.String(), Count: sl.c.count, Root: sl.c.root,
		Peer: sl.peer, Tag: int(sl.tag), WaitingOn: -1, Start: sl.start, End: sl.end,
	}
	switch sl.kind {
	case kindSend:
		e.Op = "send"
	case kindRecv:
		e.Op = "recv"
	}
	if sl.c.op == opNewGroup {
		e.Count = 0
	}
	if sl.c.dtype != tensor.Invalid {
		e.DType = sl.c.dtype.String()
		e.Bytes = int64(e.Count) * int64(sl.c.dtype.Size())
	}
	if sl.c.rop != 0 {
		e.ReduceOp = sl.c.rop.String()
	}
	switch {
	case sl.done && sl.err != nil:
		e.State, e.Error = FlightFailed, sl.err.Error()
	case sl.done:
		e.State = FlightDone
	case sl.waitPeer >= 0:
		e.State, e.WaitingOn = FlightWaiting, sl.waitPeer
	default:
		e.State = FlightRunning
	}
	return e
}

// FlightRecord returns the group's last calls, oldest first (at most
// Options.FlightRecorder of them; none when it is off), with the state
// each is in now. The caller owns the slice.
func (g *Group) FlightRecord() []FlightEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.st.flight.entries(g.id)
}

// FlightDump is what DumpFlight writes: every group of one rank's job,
// with its flight record.
type FlightDump struct {
	Rank      int           `json:"rank"` // global rank
	WorldSize int           `json:"world_size"`
	Host      string        `json:"host"`
	PID       int           `json:"pid"`
	Reason    string        `json:"reason"` // why it was written
	Time      time.Time     `json:"time"`
	Groups    []FlightGroup `json:"groups"`
}

// FlightGroup is one group in a FlightDump.
type FlightGroup struct {
	ID      uint32        `json:"id"`
	Ranks   []int         `json:"ranks"` // the members' global ranks
	Rank    int           `json:"rank"`  // this rank's rank in the group
	Error   string        `json:"error,omitempty"`
	Entries []FlightEntry `json:"entries"`
}

// FlightDump returns the flight record of every group of g's job in this
// process (g's own first), labelled with reason.
func (g *Group) FlightDump(reason string) *FlightDump { return g.world.flightDump(reason, time.Now()) }

// DumpFlight writes FlightDump(reason) as JSON to this rank's flight
// file and returns its path: godist-flight-rank<R>-<pid>.json in
// Options.FlightDir (by default GODIST_FLIGHT_DIR, else the directory of
// the launcher's error file, else os.TempDir()). A later dump replaces
// an earlier one.
func (g *Group) DumpFlight(reason string) (string, error) { return g.world.dumpFlight(reason) }

func (w *world) flightDump(reason string, now time.Time) *FlightDump {
	d := &FlightDump{Rank: w.rank, WorldSize: w.size, Host: w.host, PID: os.Getpid(), Reason: reason, Time: now}
	gs := w.groups()
	slices.SortFunc(gs, func(a, b *Group) int { return cmpUint32(a.id, b.id) })
	for _, g := range gs {
		g.mu.Lock()
		fg := FlightGroup{ID: g.id, Ranks: slices.Clone(g.ranks), Rank: g.rank, Entries: g.mu.st.flight.entries(g.id)}
		if g.mu.st.err != nil {
			fg.Error = g.mu.st.err.Error()
		}
		g.mu.Unlock()
		if fg.Entries == nil {
			fg.Entries = []FlightEntry{}
		}
		d.Groups = append(d.Groups, fg)
	}
	return d
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// flightPath is where this rank's flight dumps go.
func (w *world) flightPath() string {
	dir := w.flightDir
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "godist-flight-rank"+strconv.Itoa(w.rank)+"-"+strconv.Itoa(os.Getpid())+".json")
}

func (w *world) dumpFlight(reason string) (string, error) {
	b, err := json.MarshalIndent(w.flightDump(reason, time.Now()), "", " ")
	if err != nil {
		return "", err
	}
	path := w.flightPath()
	// A temporary file of its own: a dump on SIGUSR1 and one on a failure
	// may be written at once.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("dist: flight record: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("dist: flight record: %w", werr)
	}
	return path, nil
}

// dumpOnFailure writes the flight record when err, a group's failure, is
// a timeout or a desync (the failures whose story is in the calls), and
// says where on stderr. Only a job made by Init dumps by itself.
func (w *world) dumpOnFailure(err error) {
	var (
		te *TimeoutError
		de *DesyncError
	)
	if !w.autoDump || !errors.As(err, &te) && !errors.As(err, &de) {
		return
	}
	path, derr := w.dumpFlight(err.Error())
	if derr != nil {
		fmt.Fprintf(os.Stderr, "dist: rank %d: cannot write the flight record: %v\n", w.rank, derr)
		return
	}
	fmt.Fprintf(os.Stderr, "dist: rank %d: flight record written to %s\n", w.rank, path)
}

// The worlds of this process, for the signal handler.
var live struct {
	sync.Mutex
	worlds  map[*world]struct{}
	signals int            // DumpOnSignal calls not yet stopped
	ch      chan os.Signal // SIGUSR1, while signals > 0
}

func registerWorld(w *world) {
	live.Lock()
	defer live.Unlock()
	if live.worlds == nil {
		live.worlds = map[*world]struct{}{}
	}
	live.worlds[w] = struct{}{}
}

func unregisterWorld(w *world) {
	live.Lock()
	defer live.Unlock()
	delete(live.worlds, w)
}

// DumpOnSignal makes SIGUSR1 write the flight record of every job of
// this process (DumpFlight) and say where on stderr, until stop is
// called (calls nest: the handler goes when every stop has been
// called). The library installs no signal handler unless asked, by
// this, Options.DumpOnSignal or GODIST_FLIGHT_SIGNAL=1 (godist run sets
// it for its workers).
func DumpOnSignal() (stop func()) {
	live.Lock()
	defer live.Unlock()
	live.signals++
	if live.signals == 1 {
		ch := make(chan os.Signal, 1)
		live.ch = ch
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			for range ch {
				live.Lock()
				ws := make([]*world, 0, len(live.worlds))
				for w := range live.worlds {
					ws = append(ws, w)
				}
				live.Unlock()
				for _, w := range ws {
					if path, err := w.dumpFlight("SIGUSR1"); err != nil {
						fmt.Fprintf(os.Stderr, "dist: rank %d: cannot write the flight record: %v\n", w.rank, err)
					} else {
						fmt.Fprintf(os.Stderr, "dist: rank %d: flight record written to %s\n", w.rank, path)
					}
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			live.Lock()
			defer live.Unlock()
			live.signals--
			if live.signals == 0 {
				signal.Stop(live.ch)
				close(live.ch)
				live.ch = nil
			}
		})
	}
}
