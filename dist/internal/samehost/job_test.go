package samehost

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"unsafe"
)

// A job of members on goroutines, over memory of this process: the
// blocks and shared tensors are heap memory that every member reaches
// through one testHost (as the transport's PeerMemory maps the others'
// files), and the exchanges of the shared-tensor calls go through
// channels.

const testGroupID = 7

// globalRank is group rank q's global rank: not q, so that errors that
// name the wrong one show.
func globalRank(q int) int { return 10 + 3*q }

// aligned returns n zero bytes starting on a 64-byte boundary, as a
// mapping would.
func aligned(n int) []byte {
	b := make([]byte, n+64)
	o := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	return b[o : o+n : o+n]
}

// testHost is the members' memory: regions by global rank and id.
type testHost struct {
	mu      sync.RWMutex
	regions map[[2]int][]byte
}

var _ Regions = (*testHost)(nil)

func (h *testHost) LockPeerRegions()   { h.mu.RLock() }
func (h *testHost) UnlockPeerRegions() { h.mu.RUnlock() }
func (h *testHost) PeerRegion(peer int, id uint8) []byte {
	return h.regions[[2]int{peer, int(id)}]
}
func (h *testHost) UsePeerRegions(fn func(region func(peer int, id uint8) []byte) error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return fn(h.PeerRegion)
}

// mapRegion makes peer's region id n bytes, or unmaps it (n < 0); only
// while no call uses the regions.
func (h *testHost) mapRegion(peer int, id uint8, n int) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.regions == nil {
		h.regions = map[[2]int][]byte{}
	}
	k := [2]int{peer, int(id)}
	if n < 0 {
		delete(h.regions, k)
		return nil
	}
	h.regions[k] = aligned(n)
	return h.regions[k]
}

// testJob is a group of members on goroutines.
type testJob struct {
	host    testHost
	members []*testMember
	// ctx ends when a member's function fails, so that the others do not
	// wait for it forever: the group failing.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	gone  map[int]error             // by group rank: PeerErr
	boxes map[[4]uint64]chan []byte // the exchanges' frames, by (seq, tag, from, to)
}

// testMember is one member: its engine, and what its group heard.
type testMember struct {
	j   *testJob
	q   int
	e   *Engine
	seq uint64 // calls issued

	mu      sync.Mutex
	waiting [][2]uint64 // Waiting's (seq, q)
	waited  []uint64
}

var _ Group = (*testMember)(nil)

func (m *testMember) PeerErr(q int) error {
	m.j.mu.Lock()
	defer m.j.mu.Unlock()
	return m.j.gone[q]
}

func (m *testMember) Waiting(seq uint64, q int) {
	m.mu.Lock()
	m.waiting = append(m.waiting, [2]uint64{seq, uint64(q)})
	m.mu.Unlock()
}

func (m *testMember) Waited(seq uint64) {
	m.mu.Lock()
	m.waited = append(m.waited, seq)
	m.mu.Unlock()
}

func (j *testJob) box(seq uint64, tag uint32, from, to int) chan []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	k := [4]uint64{seq, uint64(tag), uint64(from), uint64(to)}
	ch, ok := j.boxes[k]
	if !ok {
		ch = make(chan []byte, 1)
		j.boxes[k] = ch
	}
	return ch
}

func (m *testMember) Exchange(ctx context.Context, c Call, tag uint32, msg []byte, ins [][]byte) error {
	for q := range m.j.members {
		if q != m.q {
			m.j.box(c.Seq, tag, m.q, q) <- append([]byte{}, msg...)
		}
	}
	for q := range m.j.members {
		if q == m.q {
			continue
		}
		select {
		case b := <-m.j.box(c.Seq, tag, q, m.q):
			if len(b) != len(msg) {
				return fmt.Errorf("exchange: %d bytes from member %d, want %d", len(b), q, len(msg))
			}
			ins[q] = b
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// newJob returns a group of world members, with control blocks when
// block is set.
func newJob(t testing.TB, world int, block, yield bool) *testJob {
	t.Helper()
	j := &testJob{gone: map[int]error{}, boxes: map[[4]uint64]chan []byte{}}
	j.ctx, j.cancel = context.WithCancelCause(context.Background())
	t.Cleanup(func() { j.cancel(nil) })
	ranks := make([]int, world)
	for q := range ranks {
		ranks[q] = globalRank(q)
	}
	for q := range world {
		m := &testMember{j: j, q: q}
		m.e = New(Config{ID: testGroupID, Ranks: ranks, Rank: q, Yield: yield, Group: m})
		j.members = append(j.members, m)
	}
	if block {
		ids := make([]uint8, world)
		for q := range ids {
			ids[q] = 1
		}
		for q, m := range j.members {
			mem := j.host.mapRegion(globalRank(q), 1, BlockBytes)
			if err := m.e.SetBlock(m.e.Tensors.Add(mem, &j.host, ids, func() {})); err != nil {
				t.Fatal(err)
			}
		}
	}
	return j
}

// newTensor gives every member a shared tensor of n bytes, region id
// id, and returns their copies.
func (j *testJob) newTensor(id uint8, n int) [][]byte {
	ids := make([]uint8, len(j.members))
	for q := range ids {
		ids[q] = id
	}
	mems := make([][]byte, len(j.members))
	for q, m := range j.members {
		mems[q] = j.host.mapRegion(globalRank(q), id, n)
		var t *Tensor
		t = m.e.Tensors.Add(mems[q], &j.host, ids, func() { m.e.Tensors.Remove(t) })
	}
	return mems
}

// run runs fn on every member at once, and fails t with their errors;
// the first ends j.ctx.
func (j *testJob) run(t testing.TB, fn func(m *testMember) error) {
	t.Helper()
	errs := make([]error, len(j.members))
	var wg sync.WaitGroup
	for q, m := range j.members {
		wg.Go(func() {
			if errs[q] = fn(m); errs[q] != nil {
				j.cancel(fmt.Errorf("member %d failed", q))
			}
		})
	}
	wg.Wait()
	for q, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", q, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// issue numbers this member's next call through its block, with
// fingerprint fp.
func (m *testMember) issue(fp uint64) Call {
	m.seq++
	m.e.Block().Issue(m.seq)
	return Call{Seq: m.seq, FP: fp}
}

// next numbers this member's next call through shared tensors.
func (m *testMember) next(fp uint64) Call {
	m.seq++
	return Call{Seq: m.seq, FP: fp}
}

var le = binary.LittleEndian

// sumInt64 adds src's int64s into dst's.
func sumInt64(dst, src []byte) {
	for i := 0; i+8 <= len(dst); i += 8 {
		le.PutUint64(dst[i:], le.Uint64(dst[i:])+le.Uint64(src[i:]))
	}
}

// sum is a reduction of int64 by SUM.
var sum = Reduction{Reduce: sumInt64}

// avg is a reduction of int64 by AVG over n members: SUM then a
// division, or with final the last sum and the division in one pass.
func avg(n int, final bool) Reduction {
	div := func(b []byte) {
		for i := 0; i+8 <= len(b); i += 8 {
			le.PutUint64(b[i:], uint64(int64(le.Uint64(b[i:]))/int64(n)))
		}
	}
	r := Reduction{Reduce: sumInt64, Scale: div}
	if final {
		r.Final = func(dst, src []byte) { sumInt64(dst, src); div(dst) }
	}
	return r
}

// fill writes value(i) into b's i-th int64.
func fill(b []byte, value func(i int) int64) {
	for i := 0; i+8 <= len(b); i += 8 {
		le.PutUint64(b[i:], uint64(value(i/8)))
	}
}

// check returns an error naming the first int64 of b that is not
// value(i).
func check(what string, b []byte, value func(i int) int64) error {
	for i := 0; i+8 <= len(b); i += 8 {
		if got, want := int64(le.Uint64(b[i:])), value(i/8); got != want {
			return fmt.Errorf("%s: [%d] = %d, want %d", what, i/8, got, want)
		}
	}
	return nil
}
