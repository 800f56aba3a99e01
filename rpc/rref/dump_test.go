package rref

import "fmt"

func (t *Table) dump() string {
	s := ""
	for _, id := range sortedKeys(t.owned, cmpRRef) {
		e := t.owned[id]
		s += fmt.Sprintf("  owns %v born=%v forks=%v dead=%v\n", id, e.born, e.forks, e.dead)
	}
	for _, f := range sortedKeys(t.users, cmpFork) {
		u := t.users[f]
		s += fmt.Sprintf("  user %v %v owner=%v parent=%v notify=%v confirmed=%v released=%v children=%v\n", f, u.rref, u.owner, u.parent, u.notify, u.confirmed, u.released, u.children)
	}
	return s
}
