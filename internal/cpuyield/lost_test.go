package cpuyield

import (
	"testing"
	"time"
)

// TestHold: one lost yield holds nothing; a second within Confirm holds
// the pollers asleep for HoldFor, and not longer; two further apart hold
// nothing; a later lost yield does not shorten a hold.
func TestHold(t *testing.T) {
	now := time.Now()
	h := new(Hold)
	h.Lost(now)
	if h.Held(now) {
		t.Fatal("held after one lost yield")
	}
	second := now.Add(Confirm / 2)
	h.Lost(second)
	if !h.Held(second.Add(HoldFor - time.Millisecond)) {
		t.Error("not held within HoldFor of a second lost yield")
	}
	if h.Held(second.Add(HoldFor + time.Millisecond)) {
		t.Error("still held after HoldFor")
	}

	h = new(Hold)
	h.Lost(now)
	apart := now.Add(Confirm + time.Millisecond)
	h.Lost(apart)
	if h.Held(apart) {
		t.Error("two lost yields more than Confirm apart held the pollers")
	}

	h = new(Hold)
	h.Lost(now)
	h.Lost(now.Add(Confirm / 2))
	h.Lost(now.Add(Confirm/2 - 10*time.Millisecond)) // out of order: an earlier one reported late
	if !h.Held(now.Add(Confirm/2 + HoldFor - time.Millisecond)) {
		t.Error("a lost yield reported late shortened the hold")
	}
}

// TestClear: Clear ends a hold at once, a yield lost before it confirms
// none lost after it, and two lost after it hold again. (The times are
// an hour ago: a clear only moves forward, and one in the future would
// end the holds of the tests that follow.)
func TestClear(t *testing.T) {
	now := time.Now().Add(-time.Hour)
	h := new(Hold)
	h.Lost(now)
	h.Lost(now.Add(time.Millisecond))
	if !h.Held(now.Add(2 * time.Millisecond)) {
		t.Fatal("two lost yields did not hold")
	}
	Clear(now.Add(3 * time.Millisecond))
	if h.Held(now.Add(4 * time.Millisecond)) {
		t.Error("held after Clear")
	}
	h.Lost(now.Add(5 * time.Millisecond))
	if h.Held(now.Add(6 * time.Millisecond)) {
		t.Error("a yield lost before Clear and one after held")
	}
	h.Lost(now.Add(7 * time.Millisecond))
	if !h.Held(now.Add(8 * time.Millisecond)) {
		t.Error("two yields lost after Clear did not hold")
	}
}

// TestBulkHold: a hold that yields lost in a bulk call confirmed ends
// BulkTail after the call, not HoldFor after its yields; one that yields
// lost later confirmed lasts HoldFor. (Times an hour ago, as TestClear's,
// and after its clear.)
func TestBulkHold(t *testing.T) {
	now := time.Now().Add(-time.Hour)
	if c := time.Unix(0, cleared.Load()); !now.After(c) {
		now = c.Add(time.Second)
	}
	at := func(d time.Duration) time.Time { return now.Add(d) }
	h := new(Hold)
	BulkBegan()
	h.Lost(at(0))
	h.Lost(at(time.Millisecond))
	if !h.Held(at(2 * time.Millisecond)) {
		t.Fatal("two yields lost in a bulk call did not hold")
	}
	BulkEnded(at(3 * time.Millisecond))
	if !h.Held(at(3*time.Millisecond + BulkTail/2)) {
		t.Error("a bulk call's hold ended within BulkTail of the call")
	}
	if h.Held(at(4*time.Millisecond + BulkTail)) {
		t.Error("a bulk call's hold lasted past BulkTail after the call")
	}
	later := 3*time.Millisecond + 2*BulkTail
	h.Lost(at(later))
	h.Lost(at(later + time.Millisecond))
	if !h.Held(at(later + HoldFor/2)) {
		t.Error("a hold that yields lost after the bulk call confirmed did not last")
	}
}
