package rref

import (
	"cmp"
	"fmt"
	"strings"
)

// The Table's questions: none of these changes its state.

// Owns reports whether this worker owns id: its value exists, is being
// computed, or (unborn) a fork of it was counted before the remote call
// that creates it arrived. The agent keeps a value slot for such an RRef
// so that a ToHere arriving early waits for the value.
func (t *Table) Owns(id RRefID) bool {
	_, ok := t.owned[id]
	return ok
}

// Confirmed reports whether the owner counts the handle (id, fork): a
// local handle on the owner always; a UserRRef once ConfirmRemote, a
// ForkAccept, or receipt from the owner itself confirmed it.
func (t *Table) Confirmed(id RRefID, fork ForkID) bool {
	if e := t.owned[id]; e != nil {
		_, ok := e.forks[fork]
		return ok
	}
	u := t.users[fork]
	return u != nil && u.rref == id && u.confirmed
}

// Empty reports whether the Table holds no state about live references:
// no owned RRefs and no user handles (and so no pending children or
// confirmations). Deleted RRefs it remembers to ignore duplicates do not
// count.
func (t *Table) Empty() bool { return len(t.owned) == 0 && len(t.users) == 0 }

// String describes what the Table still holds, for shutdown errors, as
// in "worker1 still holds 2 user RRefs of worker0 (1 not released, 1
// awaiting the owner's confirmation)".
func (t *Table) String() string {
	if t.Empty() {
		return fmt.Sprintf("%v holds no RRefs", t.self)
	}
	var parts []string
	if len(t.owned) > 0 {
		holders := map[WorkerID]int{}
		unborn := 0
		for _, e := range t.owned {
			if !e.born {
				unborn++
			}
			for _, h := range e.forks {
				holders[h]++
			}
		}
		s := fmt.Sprintf("%v still owns %s", t.self, plural(len(t.owned), "RRef"))
		var why []string
		for _, h := range sortedKeys(holders, cmp.Compare) {
			if h == t.self {
				why = append(why, fmt.Sprintf("%s here", plural(holders[h], "local handle")))
			} else {
				why = append(why, fmt.Sprintf("%s held by %v", plural(holders[h], "fork"), h))
			}
		}
		if unborn > 0 {
			why = append(why, fmt.Sprintf("%d whose remote call has not arrived", unborn))
		}
		if len(why) > 0 {
			s += " (" + strings.Join(why, ", ") + ")"
		}
		parts = append(parts, s)
	}
	type counts struct{ n, live, unconfirmed, children int }
	byOwner := map[WorkerID]*counts{}
	for _, u := range t.users {
		c := byOwner[u.owner]
		if c == nil {
			c = &counts{}
			byOwner[u.owner] = c
		}
		c.n++
		if !u.released {
			c.live++
		}
		if !u.confirmed {
			c.unconfirmed++
		}
		c.children += len(u.children)
	}
	for _, o := range sortedKeys(byOwner, cmp.Compare) {
		c := byOwner[o]
		var why []string
		if c.live > 0 {
			why = append(why, fmt.Sprintf("%d not released", c.live))
		}
		if c.unconfirmed > 0 {
			why = append(why, fmt.Sprintf("%d awaiting the owner's confirmation", c.unconfirmed))
		}
		if c.children > 0 {
			why = append(why, fmt.Sprintf("%s sent on, not yet accepted", plural(c.children, "fork")))
		}
		parts = append(parts, fmt.Sprintf("%v still holds %s of %v (%s)", t.self, plural(c.n, "user RRef"), o, strings.Join(why, ", ")))
	}
	return strings.Join(parts, "; ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
