package rref

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

var (
	simSeeds = flag.Int("rref.seeds", 2000, "seeds per randomized simulation test")
	simSeed  = flag.Uint64("rref.seed", 0, "run only this seed of the randomized simulation tests")
	simTail  = 25 // steps of the trace printed on failure; all with -rref.seed
)

// The simulator runs N Tables against a network that delivers in random
// order, duplicates control messages and (in one variant) kills workers,
// with a random program of creates, forks and releases on top, and checks
// the guarantees at every step against the ground truth it keeps: which
// handles user code holds and which RRefs are in flight inside RPCs.

type itemKind uint8

const (
	itMsg    itemKind = iota // a control message
	itRemote                 // the remote call of remote()
	itReply                  // its reply
	itFork                   // an RPC carrying an RRef
	itDown                   // worker to learns that worker from is dead
)

type item struct {
	kind     itemKind
	from, to WorkerID
	msg      Msg
	owner    WorkerID
	id       RRefID
	fork     ForkID
	dups     int // copies still to deliver after this one (itMsg only)
}

type handle struct {
	w     WorkerID
	id    RRefID
	fork  ForkID
	owner WorkerID
}

type sim struct {
	t      *testing.T
	seed   uint64
	r      *rand.Rand
	deaths bool
	n      int
	tabs   []*Table
	dead   []bool
	knows  [][]bool // knows[v][w]: v has processed PeerDown(w)
	net    []item
	live   []handle // handles user code holds

	owner    map[RRefID]WorkerID
	born     map[RRefID]bool
	deleted  map[RRefID]int
	liveN    map[RRefID]int // live handles per RRef
	inFlight map[RRefID]int // forks in flight inside RPCs per RRef
	involved map[RRefID]map[WorkerID]bool
	tainted  map[RRefID]bool // a worker involved with it died: G2 not checked
	trace    []logEntry      // the last simTail steps, formatted on failure
	traceN   int
}

type logEntry struct {
	format string
	args   []any
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	var tail []string
	for i := max(0, s.traceN-simTail); i < s.traceN; i++ {
		e := s.trace[i%len(s.trace)]
		tail = append(tail, fmt.Sprintf(e.format, e.args...))
	}
	s.t.Fatalf("seed %d (rerun: go test ./rpc/rref/ -run '^%s$' -rref.seed=%d): %s\nlast steps:\n  %s",
		s.seed, s.t.Name(), s.seed, fmt.Sprintf(format, args...), joinLines(tail))
}

func joinLines(l []string) string {
	out := ""
	for i, s := range l {
		if i > 0 {
			out += "\n  "
		}
		out += s
	}
	return out
}

func (s *sim) logf(format string, args ...any) {
	e := logEntry{format, args}
	if len(s.trace) < simTail {
		s.trace = append(s.trace, e)
	} else {
		s.trace[s.traceN%len(s.trace)] = e
	}
	s.traceN++
}

func (s *sim) involve(id RRefID, ws ...WorkerID) {
	m := s.involved[id]
	if m == nil {
		m = map[WorkerID]bool{}
		s.involved[id] = m
	}
	for _, w := range ws {
		m[w] = true
	}
}

func (s *sim) addHandle(h handle) {
	s.live = append(s.live, h)
	s.liveN[h.id]++
	s.involve(h.id, h.w)
}

// out queues the messages w returned and checks G1: a UserDelete leaves
// only for a fork its owner counts.
func (s *sim) out(w WorkerID, msgs []Msg) {
	for _, m := range msgs {
		if m.From != w || m.To == w {
			s.fatalf("%v returned %v", w, m)
		}
		if s.knows[w][m.To] {
			s.fatalf("%v sent %v to a worker it knows is down", w, m)
		}
		if m.Kind == UserDelete && !s.dead[m.To] && !s.tainted[m.RRef] {
			e := s.tabs[m.To].owned[m.RRef]
			if e == nil || e.forks[m.Fork] != w {
				s.fatalf("G1: %v sent %v but the owner does not count that fork", w, m)
			}
		}
		dups := 0
		if s.r.IntN(4) == 0 {
			dups = 1 + s.r.IntN(3)
		}
		s.net = append(s.net, item{kind: itMsg, from: w, to: m.To, msg: m, dups: dups})
	}
	s.drainDeleted(w)
}

// drainDeleted checks G2 for every value w frees: no live handle and no
// fork in flight, and exactly once.
func (s *sim) drainDeleted(w WorkerID) {
	for _, id := range s.tabs[w].Deleted() {
		s.logf("%v deletes %v", w, id)
		s.deleted[id]++
		switch {
		case s.owner[id] != w:
			s.fatalf("%v deleted %v, owned by %v", w, id, s.owner[id])
		case s.deleted[id] > 1:
			s.fatalf("%v deleted %v %d times", w, id, s.deleted[id])
		case !s.born[id]:
			s.fatalf("%v deleted %v before its remote call arrived", w, id)
		case s.tainted[id]:
		case s.liveN[id] > 0:
			s.fatalf("G2: %v deleted %v while %d handles to it are live", w, id, s.liveN[id])
		case s.inFlight[id] > 0:
			s.fatalf("G2: %v deleted %v while %d forks of it are in flight", w, id, s.inFlight[id])
		}
	}
}

func (s *sim) alive() []WorkerID {
	var ws []WorkerID
	for i := range s.n {
		if !s.dead[i] {
			ws = append(ws, WorkerID(i))
		}
	}
	return ws
}

func (s *sim) pick(ws []WorkerID) WorkerID { return ws[s.r.IntN(len(ws))] }

// act runs one random step of the user program.
func (s *sim) act() {
	alive := s.alive()
	switch x := s.r.IntN(100); {
	case x < 8:
		w := s.pick(alive)
		id, f := s.tabs[w].NewOwned()
		s.logf("%v NewOwned %v %v", w, id, f)
		s.owner[id], s.born[id] = w, true
		s.addHandle(handle{w, id, f, w})
	case x < 22:
		a, o := s.pick(alive), s.pick(alive)
		id, f, err := s.tabs[a].CreateRemote(o)
		if err != nil {
			if s.knows[a][o] {
				return
			}
			s.fatalf("%v CreateRemote(%v): %v", a, o, err)
		}
		s.owner[id] = o
		s.involve(id, o)
		if o == a {
			s.born[id] = true
		}
		if s.r.IntN(20) == 0 {
			s.logf("%v CreateRemote on %v: %v %v, send fails", a, o, id, f)
			s.out(a, s.tabs[a].CancelRemote(id, f))
			return
		}
		s.logf("%v CreateRemote on %v: %v %v", a, o, id, f)
		s.addHandle(handle{a, id, f, o})
		if o != a {
			s.net = append(s.net, item{kind: itRemote, from: a, to: o, id: id, fork: f})
		}
	case x < 60:
		if len(s.live) == 0 {
			return
		}
		h := s.live[s.r.IntN(len(s.live))]
		to := s.pick(alive)
		child, err := s.tabs[h.w].Fork(h.id, h.fork, to)
		if err != nil {
			k := s.knows[h.w]
			if errors.Is(err, ErrPeerDown) && k[to] || errors.Is(err, ErrUnknown) && (k[h.owner] || k[h.id.Creator]) {
				return // the owner, the target or the creator of an unborn RRef is known dead
			}
			s.fatalf("%v Fork %v %v to %v: %v", h.w, h.id, h.fork, to, err)
		}
		s.involve(h.id, to)
		if s.r.IntN(20) == 0 {
			s.logf("%v Fork %v %v to %v: %v, send fails", h.w, h.id, h.fork, to, child)
			s.out(h.w, s.tabs[h.w].CancelFork(h.id, child))
			return
		}
		s.logf("%v Fork %v %v to %v: %v", h.w, h.id, h.fork, to, child)
		s.inFlight[h.id]++
		s.net = append(s.net, item{kind: itFork, from: h.w, to: to, owner: h.owner, id: h.id, fork: child})
	case x < 90:
		s.release()
	default:
		if !s.deaths || len(alive) <= 2 || s.r.IntN(2) != 0 {
			return
		}
		s.kill(s.pick(alive))
	}
}

func (s *sim) release() {
	if len(s.live) == 0 {
		return
	}
	i := s.r.IntN(len(s.live))
	h := s.live[i]
	s.live = slices.Delete(s.live, i, i+1)
	s.liveN[h.id]--
	s.logf("%v Release %v %v", h.w, h.id, h.fork)
	s.out(h.w, s.tabs[h.w].Release(h.id, h.fork))
	if s.r.IntN(10) == 0 { // a finalizer after an explicit Release
		s.out(h.w, s.tabs[h.w].Release(h.id, h.fork))
	}
}

func (s *sim) kill(w WorkerID) {
	s.logf("%v dies", w)
	s.dead[w] = true
	for id, m := range s.involved {
		if m[w] {
			s.tainted[id] = true
		}
	}
	s.live = slices.DeleteFunc(s.live, func(h handle) bool {
		if h.w == w {
			s.liveN[h.id]--
			return true
		}
		return false
	})
	s.net = slices.DeleteFunc(s.net, func(it item) bool {
		if it.to == w && it.kind == itFork {
			s.inFlight[it.id]--
		}
		return it.to == w
	})
	for _, v := range s.alive() {
		s.net = append(s.net, item{kind: itDown, from: w, to: v})
	}
}

// deliver delivers one random item from the network.
func (s *sim) deliver() {
	i := s.r.IntN(len(s.net))
	it := s.net[i]
	if it.kind == itMsg && it.dups > 0 {
		s.net[i].dups--
	} else {
		s.net = slices.Delete(s.net, i, i+1)
	}
	if s.dead[it.to] {
		return
	}
	if it.kind != itDown && it.from != it.to && s.knows[it.to][it.from] {
		// The agent drops what arrives from a worker it knows is dead.
		if it.kind == itFork {
			s.inFlight[it.id]--
		}
		return
	}
	t := s.tabs[it.to]
	switch it.kind {
	case itMsg:
		s.logf("deliver %v", it.msg)
		s.out(it.to, t.Handle(it.msg))
	case itRemote:
		s.logf("%v AcceptRemote from %v %v %v", it.to, it.from, it.id, it.fork)
		if err := t.AcceptRemote(it.from, it.id, it.fork); err != nil {
			s.fatalf("AcceptRemote: %v", err)
		}
		s.born[it.id] = true
		s.drainDeleted(it.to)
		s.net = append(s.net, item{kind: itReply, from: it.to, to: it.from, id: it.id, fork: it.fork})
	case itReply:
		s.logf("%v ConfirmRemote %v %v", it.to, it.id, it.fork)
		s.out(it.to, t.ConfirmRemote(it.id, it.fork))
	case itFork:
		s.inFlight[it.id]--
		out, err := t.ReceiveFork(it.from, it.owner, it.id, it.fork)
		s.logf("%v ReceiveFork from %v owner %v %v %v: %v", it.to, it.from, it.owner, it.id, it.fork, err)
		s.out(it.to, out)
		if err != nil {
			if errors.Is(err, ErrPeerDown) && s.knows[it.to][it.owner] || errors.Is(err, ErrGone) && s.tainted[it.id] {
				return
			}
			s.fatalf("ReceiveFork: %v", err)
		}
		s.addHandle(handle{it.to, it.id, it.fork, it.owner})
	case itDown:
		failed, out := t.PeerDown(it.from)
		s.logf("%v PeerDown(%v): failed %v", it.to, it.from, failed)
		s.knows[it.to][it.from] = true
		for _, id := range failed {
			if s.owner[id] != it.from && id.Creator != it.from {
				s.fatalf("%v PeerDown(%v) failed %v, owned by %v", it.to, it.from, id, s.owner[id])
			}
		}
		s.out(it.to, out)
	}
}

func runSim(t *testing.T, seed uint64, deaths bool) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 3 + r.IntN(4)
	s := &sim{
		t: t, seed: seed, r: r, deaths: deaths, n: n,
		dead:     make([]bool, n),
		owner:    map[RRefID]WorkerID{},
		born:     map[RRefID]bool{},
		deleted:  map[RRefID]int{},
		liveN:    map[RRefID]int{},
		inFlight: map[RRefID]int{},
		involved: map[RRefID]map[WorkerID]bool{},
		tainted:  map[RRefID]bool{},
	}
	for i := range n {
		s.tabs = append(s.tabs, NewTable(WorkerID(i)))
		s.knows = append(s.knows, make([]bool, n))
	}
	steps := 20 + r.IntN(150)
	deliverP := 30 + r.IntN(60) // percent of turns spent delivering
	for steps > 0 {
		if len(s.net) > 0 && r.IntN(100) < deliverP {
			s.deliver()
			continue
		}
		s.act()
		steps--
	}
	// Everyone releases everything, including what arrives meanwhile,
	// interleaved with deliveries, until the network is empty.
	for len(s.live) > 0 || len(s.net) > 0 {
		if len(s.net) > 0 && (len(s.live) == 0 || r.IntN(2) == 0) {
			s.deliver()
		} else {
			s.release()
		}
	}
	for _, w := range s.alive() {
		if !s.tabs[w].Empty() {
			s.fatalf("after everyone released and the network drained: %v\n%s", s.tabs[w], s.tabs[w].dump())
		}
	}
	for id, o := range s.owner {
		if s.born[id] && !s.dead[o] && s.deleted[id] != 1 {
			s.fatalf("%v (owner %v) deleted %d times, want once", id, o, s.deleted[id])
		}
	}
}

func runSims(t *testing.T, deaths bool) {
	if *simSeed != 0 {
		simTail = 1 << 30
		runSim(t, *simSeed, deaths)
		return
	}
	seeds := *simSeeds
	if testing.Short() {
		seeds /= 10
	}
	for seed := range uint64(seeds) {
		runSim(t, seed+1, deaths)
	}
}

func TestSim(t *testing.T)       { runSims(t, false) }
func TestSimDeaths(t *testing.T) { runSims(t, true) }
