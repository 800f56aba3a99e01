package rref

// Owns reports whether this worker owns id: its value exists, is being
// computed, or (unborn) a fork of it was counted before the remote call
// that creates it arrived. The agent keeps a value slot for such an RRef
// so that a ToHere arriving early waits for the value.
func (t *Table) Owns(id RRefID) bool {
	_, ok := t.owned[id]
	return ok
}
