package shmring

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// frameLen is the length of frame seq in a stream from seed: mostly
// small, some up to max.
func frameLen(seed, seq uint64, max int) int {
	h := rand.NewPCG(seed, seq).Uint64()
	if h%16 == 0 {
		return 8 + int(h>>8)%(max-7)
	}
	return 8 + int(h>>8)%57
}

// fillFrame writes frame seq: the sequence number, then bytes that
// depend on it and their position.
func fillFrame(b []byte, seq uint64) {
	binary.LittleEndian.PutUint64(b, seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(seq*31 + uint64(i))
	}
}

// checkFrame reports what is wrong with f as frame seq, or "".
func checkFrame(f []byte, seed, seq uint64, max int, want []byte) string {
	if n := frameLen(seed, seq, max); len(f) != n {
		return "length"
	}
	if binary.LittleEndian.Uint64(f) != seq {
		return "sequence"
	}
	fillFrame(want[:len(f)], seq)
	if !bytes.Equal(f, want[:len(f)]) {
		return "content"
	}
	return ""
}

// TestStress runs a producer and a consumer goroutine through a small
// ring (constant wraparound and fullness) with frames of random sizes
// whose sequence and content the consumer checks, random pauses on both
// sides, and a consumer that parks after a random spin: every frame
// arrives, in order, intact, and no park waits for a wakeup that never
// comes (the wait gives up after 10 s).
func TestStress(t *testing.T) {
	frames := uint64(2_000_000)
	switch {
	case testing.Short():
		frames = 200_000
	case raceEnabled:
		frames = 1_000_000
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d frames", seed, frames)
	mem := aligned(Size(1024))
	prod, err := Init(mem)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := Attach(mem)
	if err != nil {
		t.Fatal(err)
	}
	max := prod.MaxFrame()
	wakeup := make(chan struct{}, 1)
	type result struct {
		parks, sleeps, fulls, wakes int
		err                         string
	}
	prodDone := make(chan result, 1)
	go func() {
		var res result
		rng := rand.New(rand.NewPCG(seed, 1))
		buf := make([]byte, max)
		for seq := uint64(0); seq < frames; seq++ {
			b := buf[:frameLen(seed, seq, max)]
			fillFrame(b, seq)
			cut := rng.IntN(len(b) + 1)
			for {
				wake, err := prod.TryPush(b[:cut], b[cut:])
				if err == ErrFull {
					res.fulls++
					runtime.Gosched()
					continue
				}
				if err != nil {
					res.err = err.Error()
					prodDone <- res
					return
				}
				if wake {
					res.wakes++
					select {
					case wakeup <- struct{}{}:
					default: // one is pending: as good
					}
				}
				break
			}
			if rng.IntN(4096) == 0 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
		}
		prodDone <- res
	}()

	var res result
	rng := rand.New(rand.NewPCG(seed, 2))
	want := make([]byte, max)
	timer := time.NewTimer(time.Hour)
	var seq uint64
	bad := ""
	check := func(f []byte) {
		if bad == "" {
			bad = checkFrame(f, seed, seq, max, want)
		}
		seq++
	}
	for seq < frames {
		spin := rng.IntN(64)
		got := false
		for i := 0; i <= spin; i++ {
			ok, err := cons.TryPop(check)
			if err != nil {
				t.Fatalf("seed %d: frame %d: %v", seed, seq, err)
			}
			if bad != "" {
				t.Fatalf("seed %d: frame %d: wrong %s", seed, seq-1, bad)
			}
			if ok {
				got = true
				break
			}
		}
		if got {
			if rng.IntN(4096) == 0 {
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			}
			continue
		}
		res.parks++
		if !cons.Park() {
			continue
		}
		res.sleeps++
		timer.Reset(10 * time.Second)
		select {
		case <-wakeup:
		case <-timer.C:
			t.Fatalf("seed %d: lost wakeup: parked at frame %d for 10 s", seed, seq)
		}
		timer.Stop()
		cons.Unpark()
	}
	p := <-prodDone
	if p.err != "" {
		t.Fatalf("seed %d: producer: %s", seed, p.err)
	}
	if ok, err := cons.TryPop(func([]byte) {}); ok || err != nil {
		t.Fatalf("seed %d: a frame after the last: %v", seed, err)
	}
	t.Logf("%d parks, %d sleeps, %d wakeups sent, %d pushes into a full ring", res.parks, res.sleeps, p.wakes, p.fulls)
}
