package algo

import (
	"fmt"
	"slices"
)

// Validate checks s as the schedule of rank in a group of size ranks whose
// buffer holds bufLen elements: every transfer lies inside the buffer, has
// a peer in 0..size-1 other than rank, and no send carries Reduce; a group
// of one rank has an empty schedule; and within each round no two receives
// overlap and, unless the round is a Snapshot round, no send overlaps a
// receive; a Joined transfer follows one with the same peer in its list,
// neither of them empty. Ranges of zero elements overlap nothing. Validate does not check
// that the schedules of different ranks match each other; the tests here do
// that by running them.
func (s Schedule) Validate(rank, size, bufLen int) error {
	if size < 1 || rank < 0 || rank >= size {
		return fmt.Errorf("algo: rank %d out of range for a group of %d", rank, size)
	}
	if size == 1 && len(s) > 0 {
		return fmt.Errorf("algo: a group of one rank needs an empty schedule, got %d rounds", len(s))
	}
	for i, r := range s {
		check := func(kind string, x Xfer) error {
			switch {
			case x.Peer < 0 || x.Peer >= size:
				return fmt.Errorf("algo: rank %d round %d: %s peer %d out of range for a group of %d", rank, i, kind, x.Peer, size)
			case x.Peer == rank:
				return fmt.Errorf("algo: rank %d round %d: %s to itself", rank, i, kind)
			case x.Off < 0 || x.Len < 0 || x.Off > bufLen-x.Len:
				return fmt.Errorf("algo: rank %d round %d: %s [%d:%d] outside the buffer of %d elements", rank, i, kind, x.Off, x.Off+x.Len, bufLen)
			}
			return nil
		}
		for k, xs := range [][]Xfer{r.Sends, r.Recvs} {
			for j, x := range xs {
				if x.Joined && (j == 0 || xs[j-1].Peer != x.Peer || x.Len == 0 || xs[j-1].Len == 0) {
					return fmt.Errorf("algo: rank %d round %d: %s [%d:%d] with peer %d is Joined but does not follow a non-empty transfer with that peer", rank, i, [2]string{"send", "recv"}[k], x.Off, x.Off+x.Len, x.Peer)
				}
			}
		}
		for _, x := range r.Sends {
			if err := check("send", x); err != nil {
				return err
			}
			if x.Reduce || x.Final {
				return fmt.Errorf("algo: rank %d round %d: send [%d:%d]->%d has Reduce or Final set", rank, i, x.Off, x.Off+x.Len, x.Peer)
			}
		}
		for _, x := range r.Recvs {
			if err := check("recv", x); err != nil {
				return err
			}
			if x.Final && !x.Reduce {
				return fmt.Errorf("algo: rank %d round %d: recv [%d:%d]<-%d is Final but does not reduce", rank, i, x.Off, x.Off+x.Len, x.Peer)
			}
		}
		recvs := nonEmpty(r.Recvs)
		slices.SortFunc(recvs, func(a, b Xfer) int { return a.Off - b.Off })
		for j := 1; j < len(recvs); j++ {
			if a, b := recvs[j-1], recvs[j]; a.Off+a.Len > b.Off {
				return fmt.Errorf("algo: rank %d round %d: receives [%d:%d]<-%d and [%d:%d]<-%d overlap", rank, i, a.Off, a.Off+a.Len, a.Peer, b.Off, b.Off+b.Len, b.Peer)
			}
		}
		if r.Snapshot {
			continue
		}
		for _, x := range nonEmpty(r.Sends) {
			for _, y := range recvs {
				if x.Off < y.Off+y.Len && y.Off < x.Off+x.Len {
					return fmt.Errorf("algo: rank %d round %d: send [%d:%d]->%d overlaps receive [%d:%d]<-%d", rank, i, x.Off, x.Off+x.Len, x.Peer, y.Off, y.Off+y.Len, y.Peer)
				}
			}
		}
	}
	return nil
}

// nonEmpty returns a copy of the transfers of xs that move at least one
// element.
func nonEmpty(xs []Xfer) []Xfer {
	out := make([]Xfer, 0, len(xs))
	for _, x := range xs {
		if x.Len > 0 {
			out = append(out, x)
		}
	}
	return out
}
