// Package errorfile is the error file through which a failed worker tells
// its launcher why it failed, in the manner of torchelastic's: its
// variables ([Env], [TorchEnv]), its content ([Record], [Kind]) and the
// writing and reading of it ([Write], [Read], [Parse]).
//
// It is a leaf of its own, apart from package launch, because the two
// sides of the file link different things: a worker (package dist, so
// every program that joins a job) writes it and must not link the
// launcher's process-spawning code and its init, which re-executes the
// binary as a watchdog or a gate; the launchers (godist run's agent,
// spawn.Run, godist bench) read it through package launch, which
// re-exports what they use.
//
//	// in a worker, on its fatal path:
//	errorfile.Write(os.Getenv(errorfile.Env), errorfile.Record{Rank: 1, Kind: errorfile.PeerLost, Peer: 0, Message: err.Error()})
//	// in its launcher, once it has exited:
//	rec, err := errorfile.Read(path) // an error wrapping fs.ErrNotExist when it wrote none
package errorfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// Env names the file in which a worker that fails describes its failure
// for its launcher, in the manner of torchelastic's error file. The
// launcher sets it, and TorchEnv to the same path, for each worker;
// dist.RecordError writes it.
const Env = "GODIST_ERROR_FILE"

// TorchEnv is torchelastic's name for the error file: a PyTorch worker
// decorated with @record writes its failure there, and a godist worker
// under torchrun finds its file there.
const TorchEnv = "TORCHELASTIC_ERROR_FILE"

// Kind says what sort of failure a worker recorded.
type Kind string

const (
	// PeerLost: a peer's process died or its connection broke (dist's
	// *RankError); Peer names it.
	PeerLost Kind = "peer_lost"
	// Aborted: a peer failed the group for a reason of its own and said
	// so (dist's *AbortError); Peer names it.
	Aborted Kind = "aborted"
	// Timeout: a call did not finish in time (dist's *TimeoutError); Peer
	// names the one rank it was waiting on, if it was waiting on one.
	Timeout Kind = "timeout"
	// Desync: two ranks issued different calls (dist's *DesyncError); Peer
	// names the other.
	Desync Kind = "desync"
	// Other: anything else, and any kind this version does not know.
	Other Kind = "other"
)

// Record is the error file's content, one JSON object:
//
//	{"version":1,"rank":0,"pid":4242,"kind":"peer_lost","peer":1,
//	 "message":"dist: all_reduce failed: rank 1 is gone: ...","timestamp":1767225600,
//	 "time_ns":1767225600123456789}
//
// message and timestamp (Unix seconds) are torchelastic's, so that
// torchrun reads a godist worker's file too. time_ns is the same moment
// to the nanosecond, by the worker's clock: the launcher orders the
// failures of one host by it (launch.RootCause), where seconds would not
// tell apart failures milliseconds apart, and the order in which it reaps
// the workers is not the order in which they failed. Read also reads
// torchelastic's own form, {"message": {"message": ..., "extraInfo":
// {"timestamp": "..."}}}, as kind other.
type Record struct {
	Version int    `json:"version"`
	Rank    int    `json:"rank"` // the worker's global rank; -1 unknown
	PID     int    `json:"pid,omitempty"`
	Kind    Kind   `json:"kind"`
	Peer    int    `json:"peer"` // the global rank it blames; -1 none
	Message string `json:"message"`
	Time    int64  `json:"timestamp"` // Unix seconds
	// TimeNS is when the worker saw its failure, in Unix nanoseconds; 0
	// in a file that does not say (torchelastic's, an older godist's).
	TimeNS int64 `json:"time_ns,omitempty"`
}

// When returns when the worker saw its failure, to the nanosecond, or the
// zero time when its file does not say (Time alone, in seconds, is too
// coarse to order failures by).
func (r *Record) When() time.Time {
	if r == nil || r.TimeNS <= 0 {
		return time.Time{}
	}
	return time.Unix(0, r.TimeNS)
}

// Version is the Record.Version Write writes.
const Version = 1

// Bounds on what the launcher reads: a worker's file is input it did not
// write.
const (
	MaxFile    = 64 << 10 // bytes of file read at most
	MaxMessage = 8 << 10  // bytes of message kept (Write cuts it too)
)

// Blames returns the peer whose failure r says this worker's is a
// consequence of, or -1: the Peer of a lost peer, an abort or a timeout.
// A desync is both ranks' fault, and blames neither.
func (r *Record) Blames() int {
	if r == nil || r.Peer < 0 {
		return -1
	}
	switch r.Kind {
	case PeerLost, Aborted, Timeout:
		return r.Peer
	}
	return -1
}

// Write writes r to path atomically (a temporary file beside it,
// renamed over it), so that the launcher never reads half of one; a
// second record replaces the first. The directory must exist. It sets
// Version, fills TimeNS (with the time now) and Time (with TimeNS's
// second) when zero, and cuts Message to MaxMessage.
func Write(path string, r Record) error {
	r.Version = Version
	if r.TimeNS == 0 {
		r.TimeNS = time.Now().UnixNano()
	}
	if r.Time == 0 {
		r.Time = r.TimeNS / int64(time.Second)
	}
	r.Message = cut(r.Message, MaxMessage)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// Read reads the record a worker left at path. A missing file is an
// error that wraps fs.ErrNotExist. It reads at most MaxRecordFile bytes,
// opens nothing but a regular file (a FIFO in its place does not block
// it), and returns an error for anything it cannot parse; a kind it does
// not know becomes Other, a negative Peer -1, and the message is cut to
// MaxMessage.
func Read(path string) (*Record, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("error file %s is not a regular file (%v)", path, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFile {
		return nil, fmt.Errorf("error file %s is larger than %d bytes", path, MaxFile)
	}
	return Parse(b)
}

// Parse parses an error file's content (see Read).
func Parse(b []byte) (*Record, error) {
	var raw struct {
		Version int             `json:"version"`
		Rank    *int            `json:"rank"`
		PID     int             `json:"pid"`
		Kind    Kind            `json:"kind"`
		Peer    *int            `json:"peer"`
		Message json.RawMessage `json:"message"`
		Time    json.Number     `json:"timestamp"`
		TimeNS  json.Number     `json:"time_ns"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("error file: %w", err)
	}
	r := &Record{Version: raw.Version, Rank: -1, PID: raw.PID, Kind: raw.Kind, Peer: -1}
	if raw.Rank != nil && *raw.Rank >= 0 {
		r.Rank = *raw.Rank
	}
	if raw.Peer != nil && *raw.Peer >= 0 {
		r.Peer = *raw.Peer
	}
	switch r.Kind {
	case PeerLost, Aborted, Timeout, Desync, Other:
	default:
		r.Kind = Other
	}
	r.Time, _ = raw.Time.Int64()
	if ns, err := raw.TimeNS.Int64(); err == nil && ns > 0 {
		r.TimeNS = ns
	}
	msg := bytes.TrimSpace(raw.Message)
	switch {
	case len(msg) == 0 || bytes.Equal(msg, []byte("null")):
	case msg[0] == '"':
		if err := json.Unmarshal(msg, &r.Message); err != nil {
			return nil, fmt.Errorf("error file: message: %w", err)
		}
	case msg[0] == '{': // torchelastic's
		var torch struct {
			Message   string `json:"message"`
			ExtraInfo struct {
				Timestamp string `json:"timestamp"`
			} `json:"extraInfo"`
		}
		if err := json.Unmarshal(msg, &torch); err != nil {
			return nil, fmt.Errorf("error file: message: %w", err)
		}
		r.Message, r.Kind = torch.Message, Other
		if t, err := strconv.ParseInt(torch.ExtraInfo.Timestamp, 10, 64); err == nil && r.Time == 0 {
			r.Time = t
		}
	default:
		return nil, errors.New("error file: message is neither a string nor an object")
	}
	r.Message = cut(r.Message, MaxMessage)
	return r, nil
}

// cut shortens s to at most n bytes, at a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " [...]"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
