// Command corelat measures how long a cache line takes to go from one CPU
// to another and back: two threads pinned to two CPUs pass a counter back
// and forth through one atomic word. It prints the median round trip in
// nanoseconds over several runs.
//
//	go run ./tools/corelat [-cpus 0,1] [-n 200000]
//
// Why: on the virtual machines these benchmarks run on, the host moves
// the two vCPUs between nearby cores (one cache, round trip ~60 ns) and
// distant ones (~350 ns) from minute to minute. Every exchange between
// two ranks moves cache lines between their CPUs, so DDP's step (and
// PyTorch's) is slower while they are distant, and a benchmark that does
// not record which case it ran in cannot be compared with another
// (tools/ddpcmp/run.sh records it every round).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	cpus := flag.String("cpus", "0,1", "the two CPUs")
	n := flag.Int("n", 100000, "round trips per run")
	runs := flag.Int("runs", 5, "runs; the median is printed")
	flag.Parse()
	var c [2]int
	parts := strings.Split(*cpus, ",")
	if len(parts) != 2 {
		fmt.Fprintln(os.Stderr, "corelat: -cpus takes two CPUs")
		os.Exit(2)
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "corelat:", err)
			os.Exit(2)
		}
		c[i] = v
	}
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 3))
	var res []float64
	for range *runs {
		d, err := roundTrip(c, *n)
		if err != nil {
			fmt.Fprintln(os.Stderr, "corelat:", err)
			os.Exit(1)
		}
		res = append(res, d)
	}
	slices.Sort(res)
	fmt.Printf("%.0f\n", res[len(res)/2])
}

// roundTrip returns the mean round trip in ns between CPUs c[0] and c[1].
func roundTrip(c [2]int, n int) (float64, error) {
	var word atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var start, end time.Time
	for side := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(c[side])
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs <- fmt.Errorf("pin to CPU %d: %w", c[side], err)
				word.Store(-1)
				return
			}
			if side == 0 {
				for word.Load() != 1 { // the other side is pinned
					if word.Load() < 0 {
						return
					}
				}
				start = time.Now()
				for i := int64(1); i <= int64(n); i++ {
					word.Store(2 * i)
					for word.Load() != 2*i+1 {
					}
				}
				end = time.Now()
				return
			}
			if !word.CompareAndSwap(0, 1) {
				return // the other side could not pin itself
			}
			for i := int64(1); i <= int64(n); i++ {
				for v := word.Load(); v != 2*i; v = word.Load() {
					if v < 0 {
						return
					}
				}
				word.Store(2*i + 1)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(end.Sub(start).Nanoseconds()) / float64(n), nil
}
