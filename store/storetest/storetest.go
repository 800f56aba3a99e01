// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godist/godist/store"
)

// short is the deadline of calls that are meant to time out.
const short = 80 * time.Millisecond

// long bounds every call that is meant to succeed, so that a broken store
// fails the test instead of hanging it.
const long = 10 * time.Second

// Run runs the suite. newStore must return an empty store, usable until
// the test ends; it should release what it made with t.Cleanup. Run closes
// the stores itself as well, so Close must be idempotent.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"SetGet", testSetGet},
		{"ValuesAreCopied", testCopy},
		{"GetBlocksUntilSet", testGetBlocks},
		{"GetTimeout", testGetTimeout},
		{"GetCanceled", testGetCanceled},
		{"Add", testAdd},
		{"AddConcurrent", testAddConcurrent},
		{"CompareAndSet", testCAS},
		{"Check", testCheck},
		{"Delete", testDelete},
		{"NumKeys", testNumKeys},
		{"WaitMany", testWaitMany},
		{"WaitTimeout", testWaitTimeout},
		{"Concurrent", testConcurrent},
		{"Limits", testLimits},
		{"WriteOnce", testWriteOnce},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			defer s.Close()
			tc.fn(t, s)
		})
	}
}

func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), long)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s store.Store, key string) []byte {
	t.Helper()
	v, err := s.Get(ctxLong(t), key)
	must(t, err)
	return v
}

func testSetGet(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	must(t, s.Set(ctx, "a", []byte("1")))
	must(t, s.Set(ctx, "rank3/addr", []byte("10.0.0.3:1234")))
	must(t, s.Set(ctx, "empty", nil))
	if v := get(t, s, "a"); string(v) != "1" {
		t.Errorf("get a = %q", v)
	}
	if v := get(t, s, "rank3/addr"); string(v) != "10.0.0.3:1234" {
		t.Errorf("get rank3/addr = %q", v)
	}
	if v := get(t, s, "empty"); len(v) != 0 {
		t.Errorf("get empty = %q", v)
	}
	must(t, s.Set(ctx, "a", []byte("two")))
	if v := get(t, s, "a"); string(v) != "two" {
		t.Errorf("after overwrite: get a = %q", v)
	}
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 64<<10)
	must(t, s.Set(ctx, "big", big))
	if v := get(t, s, "big"); !bytes.Equal(v, big) {
		t.Errorf("big value: got %d bytes back", len(v))
	}
}

func testCopy(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	v := []byte("value")
	must(t, s.Set(ctx, "k", v))
	v[0] = 'X'
	got := get(t, s, "k")
	if string(got) != "value" {
		t.Fatalf("Set kept the caller's slice: got %q", got)
	}
	got[0] = 'Y'
	if again := get(t, s, "k"); string(again) != "value" {
		t.Fatalf("Get returned the store's slice: got %q", again)
	}
	exp, des := []byte(""), []byte("d")
	cur, err := s.CompareAndSet(ctx, "c", exp, des)
	must(t, err)
	des[0] = 'Z'
	cur[0] = 'W'
	if again := get(t, s, "c"); string(again) != "d" {
		t.Fatalf("CompareAndSet kept or returned a shared slice: got %q", again)
	}
}

func testGetBlocks(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	type res struct {
		v   []byte
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := s.Get(ctx, "late")
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		t.Fatalf("Get returned before Set: %q, %v", r.v, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	must(t, s.Set(ctx, "late", []byte("here")))
	select {
	case r := <-ch:
		if r.err != nil || string(r.v) != "here" {
			t.Fatalf("Get = %q, %v", r.v, r.err)
		}
	case <-time.After(long):
		t.Fatal("Get not released by Set")
	}
}

// checkTimeout checks that err is a timeout of op naming key.
func checkTimeout(t *testing.T, err error, want error, op, key string, start time.Time) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error wrapping %v", op, err, want)
	}
	var te *store.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("%s: got %T (%v), want *store.TimeoutError", op, err, err)
	}
	if !strings.Contains(err.Error(), key+`"`) || !strings.Contains(err.Error(), op) {
		t.Errorf("%s: error %q does not name the operation and the key %q", op, err, key)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%s: returned after %v", op, d)
	}
}

func testGetTimeout(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	start := time.Now()
	_, err := s.Get(ctx, "rank3/addr")
	if time.Since(start) < short/2 {
		t.Errorf("Get timed out after %v, before its deadline", time.Since(start))
	}
	checkTimeout(t, err, context.DeadlineExceeded, "get", "rank3/addr", start)
	// The store stays usable.
	must(t, s.Set(ctxLong(t), "rank3/addr", []byte("x")))
	if v := get(t, s, "rank3/addr"); string(v) != "x" {
		t.Fatalf("get after timeout = %q", v)
	}
}

func testGetCanceled(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := s.Get(ctx, "never")
	checkTimeout(t, err, context.Canceled, "get", "never", start)
	if _, err := s.Get(ctx, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a canceled ctx: %v", err)
	}
}

func testAdd(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	for _, step := range []struct{ delta, want int64 }{{5, 5}, {-2, 3}, {0, 3}, {100, 103}} {
		n, err := s.Add(ctx, "counter", step.delta)
		must(t, err)
		if n != step.want {
			t.Fatalf("Add(%d) = %d, want %d", step.delta, n, step.want)
		}
	}
	if v := get(t, s, "counter"); string(v) != "103" {
		t.Fatalf("counter reads %q, want decimal text 103", v)
	}
	must(t, s.Set(ctx, "preset", []byte("-7")))
	if n, err := s.Add(ctx, "preset", 2); err != nil || n != -5 {
		t.Fatalf("Add on a preset counter = %d, %v", n, err)
	}
	must(t, s.Set(ctx, "text", []byte("hello")))
	if _, err := s.Add(ctx, "text", 1); !errors.Is(err, store.ErrNotInteger) {
		t.Fatalf("Add on text: got %v, want ErrNotInteger", err)
	}
	if v := get(t, s, "text"); string(v) != "hello" {
		t.Fatalf("failed Add changed the value to %q", v)
	}
}

func testAddConcurrent(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.Add(ctx, "n", 1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n, err := s.Add(ctx, "n", 0)
	must(t, err)
	if n != workers*each {
		t.Fatalf("counter = %d, want %d", n, workers*each)
	}
}

func testCAS(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	cas := func(exp, des string) []byte {
		t.Helper()
		v, err := s.CompareAndSet(ctx, "k", []byte(exp), []byte(des))
		must(t, err)
		return v
	}
	// Missing key, non-empty expected: nothing stored, nil returned.
	if v := cas("x", "y"); v != nil {
		t.Fatalf("missing key, expected %q: got %q, want nil", "x", v)
	}
	if ok, _ := s.Check(ctx, "k"); ok {
		t.Fatal("missing key with a non-empty expected was set")
	}
	// Missing key, empty expected: set.
	if v := cas("", "first"); string(v) != "first" {
		t.Fatalf("missing key, empty expected: got %q", v)
	}
	// Mismatch: unchanged, current value returned.
	if v := cas("wrong", "second"); string(v) != "first" {
		t.Fatalf("mismatch: got %q, want %q", v, "first")
	}
	// Empty expected on an existing key is a mismatch too.
	if v := cas("", "second"); string(v) != "first" {
		t.Fatalf("empty expected on an existing key: got %q", v)
	}
	// Match: swapped.
	if v := cas("first", "second"); string(v) != "second" {
		t.Fatalf("match: got %q", v)
	}
	if v := get(t, s, "k"); string(v) != "second" {
		t.Fatalf("after swap: get = %q", v)
	}
	// Swap to and from the empty value.
	if v := cas("second", ""); v == nil || len(v) != 0 {
		t.Fatalf("swap to empty: got %q (nil %v), want empty non-nil", v, v == nil)
	}
	if v := cas("x", "y"); v == nil || len(v) != 0 {
		t.Fatalf("mismatch on an empty value: got %q (nil %v), want empty non-nil", v, v == nil)
	}
	if v := cas("", "third"); string(v) != "third" {
		t.Fatalf("match on an empty value: got %q", v)
	}
	// CompareAndSet releases a blocked Get.
	ch := make(chan []byte, 1)
	go func() {
		v, _ := s.Get(ctx, "cas/wake")
		ch <- v
	}()
	time.Sleep(5 * time.Millisecond)
	if v, err := s.CompareAndSet(ctx, "cas/wake", nil, []byte("w")); err != nil || string(v) != "w" {
		t.Fatalf("CompareAndSet = %q, %v", v, err)
	}
	select {
	case v := <-ch:
		if string(v) != "w" {
			t.Fatalf("Get released with %q", v)
		}
	case <-time.After(long):
		t.Fatal("CompareAndSet did not release Get")
	}
}

func testCheck(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	check := func(keys ...string) bool {
		t.Helper()
		ok, err := s.Check(ctx, keys...)
		must(t, err)
		return ok
	}
	if !check() {
		t.Error("Check() with no keys = false")
	}
	if check("a") {
		t.Error("Check(missing) = true")
	}
	must(t, s.Set(ctx, "a", []byte("1")))
	if !check("a") || check("a", "b") {
		t.Error("Check after setting a: wrong")
	}
	must(t, s.Set(ctx, "b", nil))
	if !check("a", "b") {
		t.Error("Check(a, b) = false after setting both")
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	must(t, s.Set(ctx, "k", []byte("v")))
	if ok, err := s.Delete(ctx, "k"); err != nil || !ok {
		t.Fatalf("Delete(existing) = %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, "k"); err != nil || ok {
		t.Fatalf("Delete(missing) = %v, %v", ok, err)
	}
	if ok, _ := s.Check(ctx, "k"); ok {
		t.Fatal("key exists after Delete")
	}
	short, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	if _, err := s.Get(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get after Delete: %v, want a timeout", err)
	}
	if n, err := s.Add(ctx, "k", 2); err != nil || n != 2 {
		t.Fatalf("Add after Delete = %d, %v; want 2 (a missing key counts as 0)", n, err)
	}
}

func testNumKeys(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	num := func() int64 {
		t.Helper()
		n, err := s.NumKeys(ctx)
		must(t, err)
		return n
	}
	if n := num(); n != 0 {
		t.Fatalf("NumKeys of a new store = %d", n)
	}
	for i := range 3 {
		must(t, s.Set(ctx, fmt.Sprint("k", i), nil))
	}
	must(t, s.Set(ctx, "k0", []byte("again")))
	if n := num(); n != 3 {
		t.Fatalf("NumKeys = %d, want 3", n)
	}
	s.Delete(ctx, "k1")
	if _, err := s.Add(ctx, "counter", 1); err != nil {
		t.Fatal(err)
	}
	if n := num(); n != 3 {
		t.Fatalf("NumKeys after delete and add = %d, want 3", n)
	}
}

func testWaitMany(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	must(t, s.Wait(ctx)) // no keys: at once
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, "w1", "w2", "w3") }()
	for _, k := range []string{"w2", "w1"} {
		must(t, s.Set(ctx, k, nil))
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned with w3 missing: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	must(t, s.Set(ctx, "w3", []byte("x")))
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(long):
		t.Fatal("Wait not released")
	}
	must(t, s.Wait(ctx, "w1", "w2", "w3")) // all exist: at once
}

func testWaitTimeout(t *testing.T, s store.Store) {
	must(t, s.Set(ctxLong(t), "here", nil))
	ctx, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	start := time.Now()
	err := s.Wait(ctx, "here", "rank1/ready")
	checkTimeout(t, err, context.DeadlineExceeded, "wait", "rank1/ready", start)
}

func testConcurrent(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				if err := s.Set(ctx, fmt.Sprintf("rank%d/addr", i), []byte(fmt.Sprint("addr", i))); err != nil {
					return err
				}
				for j := range n {
					v, err := s.Get(ctx, fmt.Sprintf("rank%d/addr", (i+j)%n))
					if err != nil {
						return err
					}
					if want := fmt.Sprint("addr", (i+j)%n); string(v) != want {
						return fmt.Errorf("rank %d read %q, want %q", i, v, want)
					}
				}
				if _, err := s.Add(ctx, "arrived", 1); err != nil {
					return err
				}
				_, err := s.Check(ctx, "arrived")
				return err
			}()
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	if v := get(t, s, "arrived"); string(v) != strconv.Itoa(n) {
		t.Fatalf("arrived = %q, want %d", v, n)
	}
}

func testLimits(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	long := strings.Repeat("k", store.MaxKeyLen+1)
	if err := s.Set(ctx, long, nil); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Set with a %d-byte key: %v, want ErrTooLarge", len(long), err)
	}
	if _, err := s.Check(ctx, "a", long); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("Check with a %d-byte key: %v, want ErrTooLarge", len(long), err)
	}
}

func testClose(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	must(t, s.Set(ctx, "k", []byte("v")))
	blocked := make(chan error, 2)
	go func() {
		_, err := s.Get(ctx, "never")
		blocked <- err
	}()
	go func() { blocked <- s.Wait(ctx, "never") }()
	time.Sleep(20 * time.Millisecond)
	must(t, s.Close())
	for range 2 {
		select {
		case err := <-blocked:
			if !errors.Is(err, store.ErrClosed) {
				t.Errorf("blocked call after Close: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not release a blocked call")
		}
	}
	calls := map[string]func() error{
		"set":     func() error { return s.Set(ctx, "k", nil) },
		"get":     func() error { _, err := s.Get(ctx, "k"); return err },
		"add":     func() error { _, err := s.Add(ctx, "n", 1); return err },
		"cas":     func() error { _, err := s.CompareAndSet(ctx, "k", nil, nil); return err },
		"wait":    func() error { return s.Wait(ctx, "k") },
		"check":   func() error { _, err := s.Check(ctx, "k"); return err },
		"delete":  func() error { _, err := s.Delete(ctx, "k"); return err },
		"numkeys": func() error { _, err := s.NumKeys(ctx); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testWriteOnce: a key with a "once" segment, once it exists, is neither
// changed (Set of another value, Add, CompareAndSet) nor deleted; setting
// the same value again succeeds; an ordinary key beside it is not affected.
func testWriteOnce(t *testing.T, s store.Store) {
	ctx := ctxLong(t)
	const k = "job/once/rank/3"
	if !store.WriteOnce(k) || !store.WriteOnce("once/x") || store.WriteOnce("job/oncer/x") || store.WriteOnce("job/x") {
		t.Fatal("WriteOnce classifies keys wrongly")
	}
	got, err := s.CompareAndSet(ctx, k, nil, []byte("first"))
	if err != nil || string(got) != "first" {
		t.Fatalf("first CompareAndSet: %q, %v", got, err)
	}
	got, err = s.CompareAndSet(ctx, k, []byte("first"), []byte("second"))
	if err != nil || string(got) != "first" {
		t.Fatalf("a CompareAndSet replacing a write-once key: %q, %v; want it left at first", got, err)
	}
	if err := s.Set(ctx, k, []byte("second")); !errors.Is(err, store.ErrWriteOnce) {
		t.Fatalf("Set of another value: %v, want an error wrapping ErrWriteOnce", err)
	}
	if err := s.Set(ctx, k, []byte("first")); err != nil {
		t.Fatalf("Set of the same value: %v", err)
	}
	if _, err := s.Add(ctx, k, 1); !errors.Is(err, store.ErrWriteOnce) {
		t.Fatalf("Add to a write-once key: %v, want an error wrapping ErrWriteOnce", err)
	}
	if ok, err := s.Delete(ctx, k); !errors.Is(err, store.ErrWriteOnce) || ok {
		t.Fatalf("Delete of a write-once key: %v, %v", ok, err)
	}
	if v := get(t, s, k); string(v) != "first" {
		t.Fatalf("the write-once key holds %q", v)
	}
	must(t, s.Set(ctx, "job/x", []byte("a")))
	must(t, s.Set(ctx, "job/x", []byte("b")))
	if ok, err := s.Delete(ctx, "job/x"); err != nil || !ok {
		t.Fatalf("Delete of an ordinary key: %v, %v", ok, err)
	}
}
