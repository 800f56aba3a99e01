package samehost

import (
	"fmt"
	"maps"
	"testing"
)

// The control block's protocol as a model: every interleaving of a few
// members' steps, explored exhaustively. Each member issues its calls in
// order, takes them in any order (the runners of async calls), starts
// each when Turns says it is its turn, waits until every other member
// has published the call before (unless it saw all their headers of that
// call), writes its input into its slot Slot(ord), publishes the sequence
// word, reads the slots it needs once their members have published the
// call there (every other member's; a broadcast's root none, its other
// members the root's), holding what it read until the call ends, and
// ends the call. The model checks that no member overwrites a slot that
// another still reads, that a member reads the call it waited for, and
// that every interleaving ends with every call done (no member waits
// forever on a word overwritten by a later call), and that a member
// waiting for another's header of the call before finds that header
// still there (it checks its fingerprint).

// model is one configuration of the protocol.
type model struct {
	members, calls int
	slots          int              // slots a member has
	slot           func(uint64) int // the slot of a call
	gate           bool             // calls wait for their turn (Turns.Turn)
	// roots holds each call's kind: -1 every member reads every other's
	// slot; r >= 0, a broadcast from member r. Nil: all -1.
	roots []int
	// noPrewait drops the wait for the call before (for the model's
	// teeth).
	noPrewait bool
}

// phases of a call on a member.
const (
	notIssued = iota
	issued
	taken   // waiting for its turn
	prewait // its turn came: wait for the others' call before (run.next)
	write   // write the input
	publish // store the sequence word
	read    // read the others' slots, in rank order (run.next)
	end     // every slot read: end the call
	done
)

type run struct {
	ord   uint64
	phase int8
	next  int8 // reading the next-th other member
}

type mstate struct {
	turns []Turns
	runs  [][]run    // by member, by call
	word  [][]uint64 // by member, by slot: the sequence word
	data  [][]uint64 // by member, by slot: whose call's input is there
}

func (m model) seq(i int) uint64 { return uint64(5*i + 2) }

func (m model) initial() *mstate {
	s := &mstate{turns: make([]Turns, m.members)}
	for range m.members {
		s.runs = append(s.runs, make([]run, m.calls))
		s.word = append(s.word, make([]uint64, m.slots))
		s.data = append(s.data, make([]uint64, m.slots))
	}
	return s
}

func (s *mstate) clone() *mstate {
	c := &mstate{turns: make([]Turns, len(s.turns))}
	for i, t := range s.turns {
		c.turns[i] = t
		c.turns[i].byseq = maps.Clone(t.byseq)
	}
	for i := range s.runs {
		c.runs = append(c.runs, append([]run(nil), s.runs[i]...))
		c.word = append(c.word, append([]uint64(nil), s.word[i]...))
		c.data = append(c.data, append([]uint64(nil), s.data[i]...))
	}
	return c
}

// key encodes s (the Turns follow from the runs' phases).
func (s *mstate) key() string {
	var b []byte
	for p := range s.runs {
		for _, r := range s.runs[p] {
			b = append(b, byte(r.ord), byte(r.phase), byte(r.next))
		}
		for i := range s.word[p] {
			b = append(b, byte(s.word[p][i]), byte(s.data[p][i]))
		}
	}
	return string(b)
}

// deps returns the members whose slots member p reads in call i.
func (m model) deps(p, i int) []int {
	var d []int
	root := -1
	if m.roots != nil {
		root = m.roots[i]
	}
	for q := range m.members {
		if q != p && (root < 0 || q == root) && p != root {
			d = append(d, q)
		}
	}
	return d
}

// sawAll reports whether member p, having ended call i, saw every other
// member's header of it.
func (m model) sawAll(p, i int) bool { return len(m.deps(p, i)) == m.members-1 }

// peer returns the next-th member other than p.
func peer(p, next int) int {
	if next >= p {
		return next + 1
	}
	return next
}

// holds reports whether p's call i, in state r, holds (has read, and
// not yet ended) member q's slot.
func (m model) holds(p, i int, r run, q int) bool {
	if r.phase != read && r.phase != end {
		return false
	}
	for _, d := range m.deps(p, i)[:r.next] {
		if d == q {
			return true
		}
	}
	return false
}

// steps returns the states one step from s, or a violation.
func (m model) steps(s *mstate) ([]*mstate, error) {
	var out []*mstate
	for p := range m.members {
		issuedAll := true
		for i := range m.calls {
			r := s.runs[p][i]
			if r.phase == notIssued {
				if !issuedAll {
					continue // issued in order: only the next one
				}
				issuedAll = false
			}
			n := s.clone()
			nr := &n.runs[p][i]
			switch r.phase {
			case notIssued:
				nr.ord = n.turns[p].Issue(m.seq(i))
				if nr.ord != uint64(i+1) {
					return nil, fmt.Errorf("member %d: call %d issued as ordinal %d", p, i, nr.ord)
				}
				nr.phase = issued
			case issued:
				ord, ok := n.turns[p].Take(m.seq(i))
				if !ok || ord != r.ord {
					return nil, fmt.Errorf("member %d: call %d taken as ordinal %d %v", p, i, ord, ok)
				}
				nr.phase = taken
			case taken:
				if m.gate && !n.turns[p].Turn(r.ord) {
					continue
				}
				nr.phase, nr.next = prewait, 0
				if m.noPrewait || i == 0 || m.sawAll(p, i-1) || m.members == 1 {
					nr.phase = write
				}
			case prewait:
				q, sl := peer(p, int(r.next)), m.slot(r.ord-1)
				if s.word[q][sl] < r.ord-1 {
					continue // waits
				}
				if s.word[q][sl] != r.ord-1 || s.data[q][sl] != r.ord-1 {
					return nil, fmt.Errorf("member %d, before writing call %d, found member %d's slot %d at call %d (input of call %d): its header of call %d is gone", p, r.ord, q, sl, s.word[q][sl], s.data[q][sl], r.ord-1)
				}
				nr.next++
				if int(nr.next) == m.members-1 {
					nr.phase = write
				}
			case write:
				sl := m.slot(r.ord)
				for q := range m.members {
					for j, o := range s.runs[q] {
						if q != p && m.holds(q, j, o, p) && m.slot(o.ord) == sl {
							return nil, fmt.Errorf("member %d overwrote its slot %d with call %d while member %d still read call %d there", p, sl, r.ord, q, o.ord)
						}
					}
				}
				n.data[p][sl] = r.ord
				nr.phase = publish
			case publish:
				n.word[p][m.slot(r.ord)] = r.ord
				nr.phase, nr.next = read, 0
				if len(m.deps(p, i)) == 0 {
					nr.phase = end
				}
			case read:
				deps := m.deps(p, i)
				q, sl := deps[r.next], m.slot(r.ord)
				if s.word[q][sl] < r.ord {
					continue // waits
				}
				if s.data[q][sl] != r.ord {
					return nil, fmt.Errorf("member %d read call %d in member %d's slot %d, which holds call %d's input", p, r.ord, q, sl, s.data[q][sl])
				}
				nr.next++
				if int(nr.next) == len(deps) {
					nr.phase = end
				}
			case end:
				if m.gate {
					n.turns[p].End(r.ord)
				}
				nr.phase = done
			case done:
				continue
			}
			out = append(out, n)
		}
	}
	return out, nil
}

// explore visits every state reachable from the start, and returns how
// many, or the first violation or deadlock found.
func (m model) explore() (int, error) {
	seen := map[string]bool{}
	stack := []*mstate{m.initial()}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		k := s.key()
		if seen[k] {
			continue
		}
		seen[k] = true
		next, err := m.steps(s)
		if err != nil {
			return len(seen), err
		}
		if len(next) == 0 {
			for p := range s.runs {
				for i, r := range s.runs[p] {
					if r.phase != done {
						return len(seen), fmt.Errorf("deadlock: member %d's call %d (ordinal %d) stuck in phase %d; sequence words %v", p, i, r.ord, r.phase, s.word)
					}
				}
			}
		}
		stack = append(stack, next...)
	}
	return len(seen), nil
}

// TestModel: with Turns and Slot, every interleaving of 2 to 3 members'
// calls is safe and ends, broadcasts (whose root waits on nobody) among
// them; with one slot, calls that do not wait for their turn, or
// broadcasts without the wait for the call before, some interleaving
// breaks (the model has teeth).
func TestModel(t *testing.T) {
	for _, c := range []struct {
		members, calls int
		roots          []int
	}{
		{1, 4, nil}, {2, 5, nil}, {3, 3, nil},
		{2, 5, []int{0, 0, 0, 0, 0}}, {2, 5, []int{0, -1, 1, 1, 0}},
		{3, 3, []int{0, 0, 0}}, {3, 3, []int{0, -1, 2}}, {3, 3, []int{1, 1, -1}},
	} {
		if c.members == 3 && (testing.Short() || raceEnabled) {
			continue // 100,000 states each: seconds, a minute under -race
		}
		m := model{members: c.members, calls: c.calls, slots: Slots, slot: Slot, gate: true, roots: c.roots}
		n, err := m.explore()
		if err != nil {
			t.Fatalf("%d members, %d calls %v: %v", c.members, c.calls, c.roots, err)
		}
		t.Logf("%d members, %d calls %v: %d states", c.members, c.calls, c.roots, n)
	}
	one := model{members: 2, calls: 3, slots: 1, slot: func(uint64) int { return 0 }, gate: true}
	if _, err := one.explore(); err == nil {
		t.Error("one slot a member: no interleaving breaks")
	} else {
		t.Logf("one slot: %v", err)
	}
	ungated := model{members: 2, calls: 3, slots: Slots, slot: Slot, gate: false}
	if _, err := ungated.explore(); err == nil {
		t.Error("calls that do not wait for their turn: no interleaving breaks")
	} else {
		t.Logf("no turns: %v", err)
	}
	eager := model{members: 2, calls: 4, slots: Slots, slot: Slot, gate: true, roots: []int{0, 0, 0, 0}, noPrewait: true}
	if _, err := eager.explore(); err == nil {
		t.Error("broadcasts without the wait for the call before: no interleaving breaks")
	} else {
		t.Logf("no wait for the call before: %v", err)
	}
}
