package data

import (
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godist/godist/tensor"
)

// collect runs one pass and returns the batches.
func collect(l *Loader) [][]*tensor.Tensor {
	var out [][]*tensor.Tensor
	for b := range l.Batches() {
		out = append(out, b)
	}
	return out
}

// labels returns the int64 label column of each batch.
func labels(bs [][]*tensor.Tensor) [][]int64 {
	out := make([][]int64, len(bs))
	for i, b := range bs {
		out[i] = slices.Clone(b[1].Int64s())
	}
	return out
}

func TestLoaderPartialLastBatch(t *testing.T) {
	l := NewLoader(toy(10), LoaderOptions{BatchSize: 4})
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
	bs := collect(l)
	want := [][]int64{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}
	if got := labels(bs); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	if !equalInts(bs[2][0].Shape(), []int{2, 2, 3}) || bs[2][0].At(1, 1, 2) != 95 {
		t.Fatalf("last batch %v", bs[2][0])
	}
}

func TestLoaderDropLast(t *testing.T) {
	l := NewLoader(toy(10), LoaderOptions{BatchSize: 4, DropLast: true})
	if l.Len() != 2 {
		t.Fatalf("Len = %d, want 2", l.Len())
	}
	want := [][]int64{{0, 1, 2, 3}, {4, 5, 6, 7}}
	if got := labels(collect(l)); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	// Exact multiple: nothing dropped, with or without DropLast.
	for _, dl := range []bool{false, true} {
		l := NewLoader(toy(8), LoaderOptions{BatchSize: 4, DropLast: dl})
		if n := len(collect(l)); n != 2 || l.Len() != 2 {
			t.Fatalf("DropLast=%v: %d batches, Len %d", dl, n, l.Len())
		}
	}
	// Fewer examples than a batch.
	if n := len(collect(NewLoader(toy(3), LoaderOptions{BatchSize: 4, DropLast: true}))); n != 0 {
		t.Fatalf("%d batches from 3 examples with DropLast", n)
	}
}

func TestLoaderDefaultsAndEmpty(t *testing.T) {
	l := NewLoader(toy(3), LoaderOptions{})
	if l.Len() != 3 || len(collect(l)) != 3 {
		t.Fatal("zero BatchSize is not 1")
	}
	for _, p := range []int{0, 2} {
		if n := len(collect(NewLoader(toy(0), LoaderOptions{BatchSize: 2, Prefetch: p}))); n != 0 {
			t.Fatalf("prefetch %d: %d batches from an empty dataset", p, n)
		}
	}
}

func TestLoaderShuffleDeterminism(t *testing.T) {
	pass := func(seed uint64) [][]int64 {
		return labels(collect(NewLoader(toy(23), LoaderOptions{BatchSize: 5, Shuffle: true, Seed: seed})))
	}
	a, b := pass(1), pass(1)
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Fatal("same seed, different batches")
	}
	if slices.EqualFunc(a, pass(2), slices.Equal) {
		t.Fatal("seeds 1 and 2 gave the same batches")
	}
	all := slices.Concat(a...)
	ints := make([]int, len(all))
	for i, v := range all {
		ints[i] = int(v)
	}
	if !isPerm(ints, 23) {
		t.Fatalf("a pass does not visit every example once: %v", all)
	}
	// A new pass over the same loader reshuffles.
	l := NewLoader(toy(23), LoaderOptions{BatchSize: 5, Shuffle: true, Seed: 1})
	if e0, e1 := labels(collect(l)), labels(collect(l)); slices.EqualFunc(e0, e1, slices.Equal) {
		t.Fatal("two epochs gave the same order")
	}
	// SetEpoch pins the order to (seed, epoch).
	l1 := NewLoader(toy(23), LoaderOptions{BatchSize: 5, Shuffle: true, Seed: 1})
	l2 := NewLoader(toy(23), LoaderOptions{BatchSize: 5, Shuffle: true, Seed: 1})
	collect(l2)
	l1.SetEpoch(4)
	l2.SetEpoch(4)
	if !slices.EqualFunc(labels(collect(l1)), labels(collect(l2)), slices.Equal) {
		t.Fatal("SetEpoch(4) orders differ")
	}
}

func TestLoaderSamplerOverridesShuffle(t *testing.T) {
	l := NewLoader(toy(5), LoaderOptions{BatchSize: 5, Shuffle: true, Sampler: SequentialSampler{N: 5}})
	if got := labels(collect(l)); !slices.Equal(got[0], []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("labels %v", got)
	}
	l.SetEpoch(3) // a SequentialSampler is no EpochSetter: nothing happens
}

func TestLoaderPrefetchMatchesSync(t *testing.T) {
	for _, ds := range []Dataset{toy(37), getOnly{toy(37)}} {
		opt := LoaderOptions{BatchSize: 6, Shuffle: true, Seed: 11}
		want := collect(NewLoader(ds, opt))
		for _, p := range []int{1, 2, 5, 100} {
			opt.Prefetch = p
			got := collect(NewLoader(ds, opt))
			if len(got) != len(want) {
				t.Fatalf("prefetch %d: %d batches, want %d", p, len(got), len(want))
			}
			for i := range got {
				for k := range got[i] {
					if !tensor.Equal(got[i][k], want[i][k]) {
						t.Fatalf("prefetch %d: batch %d element %d differs: %v vs %v", p, i, k, got[i][k], want[i][k])
					}
				}
			}
		}
	}
}

// countingDataset counts Get calls and can panic at one index.
type countingDataset struct {
	Dataset
	gets    atomic.Int64
	panicAt int
	delay   time.Duration // each Get's
}

func (d *countingDataset) Get(i int) []*tensor.Tensor {
	d.gets.Add(1)
	time.Sleep(d.delay)
	if i == d.panicAt {
		panic("boom at " + string(rune('0'+i)))
	}
	return d.Dataset.Get(i)
}

// prefetchers counts the live goroutines of prefetch's producers. A
// count of all goroutines saw other tests' (a timer's callback) come and
// go beside a CPU hog: "3 goroutines after break, 2 before".
func prefetchers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "data.prefetch.func")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestLoaderBreakStopsPrefetch(t *testing.T) {
	// Slow examples: the producer is building one when the loop breaks,
	// so that a producer not joined is still there to be seen.
	ds := &countingDataset{Dataset: toy(1000), panicAt: -1, delay: 2 * time.Millisecond}
	l := NewLoader(ds, LoaderOptions{BatchSize: 1, Prefetch: 3})
	n := 0
	for range l.Batches() {
		n++
		if n == 2 {
			break
		}
	}
	// Batches joins its goroutine before the loop statement ends.
	if g := prefetchers(); g > 0 {
		t.Fatalf("%d prefetching goroutines after break", g)
	}
	got := ds.gets.Load()
	time.Sleep(20 * time.Millisecond)
	if ds.gets.Load() != got {
		t.Fatal("the prefetcher kept working after break")
	}
	// 2 consumed, at most 3 ahead (one possibly being built when stopped).
	if got > 2+3+1 {
		t.Fatalf("%d examples built for 2 batches with Prefetch 3", got)
	}
}

func TestLoaderPrefetchPanicPropagates(t *testing.T) {
	ds := &countingDataset{Dataset: toy(10), panicAt: 5}
	l := NewLoader(ds, LoaderOptions{BatchSize: 2, Prefetch: 2})
	var seen int
	func() {
		defer func() {
			if r := recover(); r != "boom at 5" {
				t.Fatalf("recovered %v, want the dataset's panic", r)
			}
		}()
		for range l.Batches() {
			seen++
		}
	}()
	if seen != 2 {
		t.Fatalf("%d batches before the panic, want 2", seen)
	}
	if g := prefetchers(); g > 0 {
		t.Fatalf("%d prefetching goroutines after the panic", g)
	}
}

func TestLoaderPanicsOnBadOptions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewLoader(toy(1), LoaderOptions{BatchSize: -1})
}
