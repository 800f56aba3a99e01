package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FileOptions configures a file store.
type FileOptions struct {
	// JobID is written in the file's header when the file is new, and must
	// match the header when it is not, so that a stale file from another
	// job is never read as this job's state.
	JobID string
	// WorldSize, when positive, is the number of processes sharing the
	// file: the Close that brings the number of Closes to WorldSize removes
	// the file (as PyTorch's FileStore does). Zero leaves the file in place.
	WorldSize int
}

// The file store's format. The file starts with one header line,
//
//	godist filestore 1 "<job id, Go-quoted>"\n
//
// followed by an append-only log of records:
//
//	op      byte    'S' set, 'D' delete, 'C' a store closed
//	key len uint32  (big endian) ≤ MaxKeyLen
//	val len uint32  ≤ MaxValueLen
//	key, value
//
// The state is the replay of the log. Every access takes flock(2) on the
// file, shared to read and exclusive to append, so a record is never seen
// half written, except one left by a writer that crashed, which the next
// exclusive holder cuts off. The log is never compacted: a file store is
// meant for one job's rendezvous, not for bulk data.
const (
	fileMagic   = "godist filestore "
	fileVersion = 1
	recHeader   = 1 + 4 + 4

	opSet    = 'S'
	opDelete = 'D'
	opClose  = 'C'

	pollMin = time.Millisecond
	pollMax = 50 * time.Millisecond
)

// fileStore is a Store in a file shared by processes on one machine or on
// a shared file system.
type fileStore struct {
	path   string
	name   string // "file " + path
	opts   FileOptions
	closed chan struct{}
	once   sync.Once

	mu struct {
		sync.Mutex // serializes the goroutines of this process; flock serializes processes
		f          *os.File
		off        int64 // log bytes applied to data
		data       map[string][]byte
		closes     int
		closed     bool
	}
}

var _ Store = (*fileStore)(nil)

// NewFile opens the file store at path, creating the file (with a header
// naming opts.JobID) if it does not exist or is empty. Opening a file whose
// header names another job fails. Blocking Get and Wait poll the file,
// from every 1 ms growing to every 50 ms.
//
// Several processes (and several Stores in one process) may open the same
// path; they see one key space. The file system must support flock(2) (local
// file systems do, and Linux NFS emulates it with POSIX locks).
func NewFile(path string, opts FileOptions) (Store, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: opening file store: %w", err)
	}
	s := &fileStore{path: path, name: "file " + path, opts: opts, closed: make(chan struct{})}
	s.mu.f = f
	s.mu.data = make(map[string][]byte)
	if err := s.openHeader(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *fileStore) openHeader() error {
	fd := int(s.mu.f.Fd())
	if err := flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("store: locking file store %s: %w", s.path, err)
	}
	defer flock(fd, syscall.LOCK_UN)
	want := fmt.Sprintf("%s%d %s\n", fileMagic, fileVersion, strconv.Quote(s.opts.JobID))
	fi, err := s.mu.f.Stat()
	if err != nil {
		return fmt.Errorf("store: file store %s: %w", s.path, err)
	}
	if fi.Size() == 0 {
		if _, err := s.mu.f.WriteAt([]byte(want), 0); err != nil {
			return fmt.Errorf("store: writing the header of file store %s: %w", s.path, err)
		}
		s.mu.off = int64(len(want))
		return nil
	}
	buf := make([]byte, min(fi.Size(), int64(len(fileMagic)+8+2+4*255+1)))
	if _, err := s.mu.f.ReadAt(buf, 0); err != nil {
		return fmt.Errorf("store: reading the header of file store %s: %w", s.path, err)
	}
	line, _, ok := bytes.Cut(buf, []byte("\n"))
	rest, isStore := strings.CutPrefix(string(line), fileMagic)
	if !ok || !isStore {
		return fmt.Errorf("store: %s is not a godist file store (it starts with %.24q): remove it or use a fresh path", s.path, buf)
	}
	ver, quoted, _ := strings.Cut(rest, " ")
	if ver != strconv.Itoa(fileVersion) {
		return fmt.Errorf("store: file store %s has format version %s, this godist reads %d: remove it or use a fresh path", s.path, ver, fileVersion)
	}
	job, err := strconv.Unquote(quoted)
	if err != nil {
		return fmt.Errorf("store: file store %s has a corrupt header %q", s.path, line)
	}
	if job != s.opts.JobID {
		return fmt.Errorf("store: file store %s belongs to job %q, not %q: remove it or use a fresh path", s.path, job, s.opts.JobID)
	}
	s.mu.off = int64(len(line) + 1)
	_, err = s.syncLocked(false)
	return err
}

// flock takes or releases a flock(2) lock, retrying on EINTR.
func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// locked runs fn holding s.mu and the file lock (exclusive or shared),
// after applying the records other stores appended.
func (s *fileStore) locked(op string, exclusive bool, fn func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return fmt.Errorf("store %s: %s: %w", s.name, op, ErrClosed)
	}
	return s.lockedLocked(exclusive, fn)
}

func (s *fileStore) lockedLocked(exclusive bool, fn func() error) error {
	fd := int(s.mu.f.Fd())
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := flock(fd, how); err != nil {
		return fmt.Errorf("store %s: lock: %w", s.name, err)
	}
	defer flock(fd, syscall.LOCK_UN)
	if _, err := s.syncLocked(exclusive); err != nil {
		return err
	}
	return fn()
}

// syncLocked applies the log's new records. Holding the exclusive lock, it
// cuts off a torn record (left by a writer that crashed).
func (s *fileStore) syncLocked(exclusive bool) (torn bool, err error) {
	fi, err := s.mu.f.Stat()
	if err != nil {
		return false, fmt.Errorf("store %s: %w", s.name, err)
	}
	size := fi.Size()
	if size <= s.mu.off {
		return false, nil
	}
	buf := make([]byte, size-s.mu.off)
	if _, err := s.mu.f.ReadAt(buf, s.mu.off); err != nil {
		return false, fmt.Errorf("store %s: reading: %w", s.name, err)
	}
	for len(buf) > 0 {
		if len(buf) < recHeader {
			torn = true
			break
		}
		op := buf[0]
		kl := int(binary.BigEndian.Uint32(buf[1:]))
		vl := int(binary.BigEndian.Uint32(buf[5:]))
		if (op != opSet && op != opDelete && op != opClose) || kl > MaxKeyLen || vl > MaxValueLen {
			return false, fmt.Errorf("store %s: corrupt record at offset %d: remove the file or use a fresh path", s.name, s.mu.off)
		}
		n := recHeader + kl + vl
		if len(buf) < n {
			torn = true
			break
		}
		s.applyLocked(op, string(buf[recHeader:recHeader+kl]), buf[recHeader+kl:n:n])
		buf = buf[n:]
		s.mu.off += int64(n)
	}
	if torn && exclusive {
		if err := s.mu.f.Truncate(s.mu.off); err != nil {
			return torn, fmt.Errorf("store %s: cutting off a torn record: %w", s.name, err)
		}
	}
	return torn, nil
}

func (s *fileStore) applyLocked(op byte, key string, val []byte) {
	switch op {
	case opSet:
		s.mu.data[key] = val
	case opDelete:
		delete(s.mu.data, key)
	case opClose:
		s.mu.closes++
	}
}

// appendLocked writes one record at the end of the log and applies it;
// the caller holds the exclusive lock.
func (s *fileStore) appendLocked(op byte, key string, val []byte) error {
	rec := make([]byte, 0, recHeader+len(key)+len(val))
	rec = append(rec, op)
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(key)))
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(val)))
	rec = append(rec, key...)
	rec = append(rec, val...)
	if _, err := s.mu.f.WriteAt(rec, s.mu.off); err != nil {
		return fmt.Errorf("store %s: writing: %w", s.name, err)
	}
	s.mu.off += int64(len(rec))
	s.applyLocked(op, key, rec[recHeader+len(key):])
	return nil
}

func (s *fileStore) begin(ctx context.Context, op string, start time.Time, keys ...string) error {
	if ctx.Err() != nil {
		return timeoutErr(ctx, s.name, op, start, keys...)
	}
	return checkKeys(keys)
}

func (s *fileStore) Set(ctx context.Context, key string, value []byte) error {
	if err := s.begin(ctx, "set", time.Now(), key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	return s.locked("set", true, func() error {
		if old, ok := s.mu.data[key]; ok && WriteOnce(key) {
			if bytes.Equal(old, value) {
				return nil
			}
			return onceErr("set", key)
		}
		return s.appendLocked(opSet, key, value)
	})
}

func (s *fileStore) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.poll(ctx, "get", []string{key}, func() bool {
		cur, ok := s.mu.data[key]
		v = clone(cur)
		return ok
	})
	return v, err
}

func (s *fileStore) Wait(ctx context.Context, keys ...string) error {
	return s.poll(ctx, "wait", keys, func() bool { return s.hasLocked(keys) })
}

// poll runs ready under a shared lock until it reports true, sleeping
// between tries with a growing backoff.
func (s *fileStore) poll(ctx context.Context, op string, keys []string, ready func() bool) error {
	start := time.Now()
	if err := s.begin(ctx, op, start, keys...); err != nil {
		return err
	}
	sleep := pollMin
	var t *time.Timer
	for {
		var ok bool
		if err := s.locked(op, false, func() error { ok = ready(); return nil }); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if t == nil {
			t = time.NewTimer(sleep)
			defer t.Stop()
		} else {
			t.Reset(sleep)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return timeoutErr(ctx, s.name, op, start, keys...)
		case <-s.closed:
			return fmt.Errorf("store %s: %s: %w", s.name, op, ErrClosed)
		}
		sleep = min(2*sleep, pollMax)
	}
}

func (s *fileStore) hasLocked(keys []string) bool {
	for _, k := range keys {
		if _, ok := s.mu.data[k]; !ok {
			return false
		}
	}
	return true
}

func (s *fileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := s.begin(ctx, "add", time.Now(), key); err != nil {
		return 0, err
	}
	var n int64
	err := s.locked("add", true, func() error {
		var err error
		if _, ok := s.mu.data[key]; ok && WriteOnce(key) {
			return onceErr("add", key)
		}
		if n, err = addTo(key, s.mu.data[key], delta); err != nil {
			return err
		}
		return s.appendLocked(opSet, key, strconv.AppendInt(nil, n, 10))
	})
	return n, err
}

func (s *fileStore) CompareAndSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := s.begin(ctx, "compare-and-set", time.Now(), key); err != nil {
		return nil, err
	}
	if err := checkValue(expected); err != nil {
		return nil, err
	}
	if err := checkValue(desired); err != nil {
		return nil, err
	}
	var out []byte
	err := s.locked("compare-and-set", true, func() error {
		cur, ok := s.mu.data[key]
		if !(ok && WriteOnce(key)) && ((!ok && len(expected) == 0) || (ok && bytes.Equal(cur, expected))) {
			if err := s.appendLocked(opSet, key, desired); err != nil {
				return err
			}
			cur, ok = s.mu.data[key], true
		}
		if ok {
			out = append(make([]byte, 0, len(cur)), cur...)
		}
		return nil
	})
	return out, err
}

func (s *fileStore) Check(ctx context.Context, keys ...string) (bool, error) {
	if err := s.begin(ctx, "check", time.Now(), keys...); err != nil {
		return false, err
	}
	var ok bool
	err := s.locked("check", false, func() error { ok = s.hasLocked(keys); return nil })
	return ok, err
}

func (s *fileStore) Delete(ctx context.Context, key string) (bool, error) {
	if err := s.begin(ctx, "delete", time.Now(), key); err != nil {
		return false, err
	}
	var ok bool
	err := s.locked("delete", true, func() error {
		if _, ok = s.mu.data[key]; !ok {
			return nil
		}
		if WriteOnce(key) {
			ok = false
			return onceErr("delete", key)
		}
		return s.appendLocked(opDelete, key, nil)
	})
	return ok, err
}

func (s *fileStore) NumKeys(ctx context.Context) (int64, error) {
	if err := s.begin(ctx, "num-keys", time.Now()); err != nil {
		return 0, err
	}
	var n int64
	err := s.locked("num-keys", false, func() error { n = int64(len(s.mu.data)); return nil })
	return n, err
}

// Close closes the file; with FileOptions.WorldSize set it first records
// the close, and removes the file if this is the last of WorldSize.
func (s *fileStore) Close() error {
	s.once.Do(func() { close(s.closed) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	var err error
	if s.opts.WorldSize > 0 {
		err = s.lockedLocked(true, func() error {
			if err := s.appendLocked(opClose, "", nil); err != nil {
				return err
			}
			if s.mu.closes >= s.opts.WorldSize {
				return os.Remove(s.path)
			}
			return nil
		})
	}
	return errors.Join(err, s.mu.f.Close())
}
