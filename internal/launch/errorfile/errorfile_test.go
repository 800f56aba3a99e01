package errorfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

func TestRecordRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	in := Record{Rank: 2, PID: 77, Kind: PeerLost, Peer: 1, Message: "dist: all_reduce failed: rank 1 is gone", Time: 1767225600, TimeNS: 1767225600123456789}
	if err := Write(path, in); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	in.Version = Version
	if err != nil || *got != in {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, in)
	}
	// A second record replaces the first, and no temporary file is left.
	if err := Write(path, Record{Rank: 2, Kind: Other, Peer: -1, Message: strings.Repeat("é", MaxMessage)}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err = Read(path)
	// The time of the failure to the nanosecond, and the same second.
	if err != nil || got.Kind != Other || got.TimeNS == 0 || got.Time != got.TimeNS/int64(time.Second) ||
		got.When().Sub(before) > time.Minute || before.Sub(got.When()) > time.Minute || len(got.Message) > MaxMessage || !utf8.ValidString(got.Message) ||
		!strings.HasSuffix(got.Message, " [...]") {
		t.Fatalf("second record: %+v, %v", got, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want 1", len(ents))
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	if err := Write(filepath.Join(t.TempDir(), "no", "dir.json"), in); err == nil {
		t.Errorf("Write into a missing directory succeeded")
	}
}

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want *Record // nil: an error
	}{
		{"ours", `{"version":1,"rank":0,"pid":9,"kind":"timeout","peer":3,"message":"m","timestamp":5,"time_ns":5000000007}`,
			&Record{Version: 1, Rank: 0, PID: 9, Kind: Timeout, Peer: 3, Message: "m", Time: 5, TimeNS: 5000000007}},
		{"an older one's, without time_ns", `{"version":1,"rank":0,"kind":"timeout","peer":3,"message":"m","timestamp":5}`,
			&Record{Version: 1, Rank: 0, Kind: Timeout, Peer: 3, Message: "m", Time: 5}},
		{"a negative time_ns", `{"kind":"other","time_ns":-3}`, &Record{Rank: -1, Kind: Other, Peer: -1}},
		{"a later version's kind", `{"version":7,"rank":1,"kind":"cosmic_ray","peer":0,"message":"m","extra":[1,2]}`,
			&Record{Version: 7, Rank: 1, Kind: Other, Peer: 0, Message: "m"}},
		{"missing fields", `{}`, &Record{Rank: -1, Kind: Other, Peer: -1}},
		{"negative ranks", `{"rank":-4,"peer":-2,"kind":"peer_lost"}`, &Record{Rank: -1, Kind: PeerLost, Peer: -1}},
		{"a quoted timestamp", `{"kind":"desync","peer":1,"timestamp":"12"}`, &Record{Rank: -1, Kind: Desync, Peer: 1, Time: 12}},
		{"torchelastic's", `{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}`,
			&Record{Rank: -1, Kind: Other, Peer: -1, Message: "RuntimeError: boom", Time: 1700000000}},
		{"torchelastic's string form", `{"message": "boom", "timestamp": 3}`, &Record{Rank: -1, Kind: Other, Peer: -1, Message: "boom", Time: 3}},
		{"empty", ``, nil},
		{"truncated", `{"rank":1,"kind":"peer_lo`, nil},
		{"not an object", `[1,2,3]`, nil},
		{"binary", "\x00\xff\xfe{", nil},
		{"wrong types", `{"rank":"one"}`, nil},
		{"message a number", `{"message":42}`, nil},
		{"timestamp a word", `{"timestamp":"yesterday"}`, nil},
		{"time_ns a word", `{"time_ns":"soon"}`, nil},
	}
	for _, c := range cases {
		got, err := Parse([]byte(c.in))
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%s: parsed %+v, want an error", c.name, got)
		case c.want != nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && *got != *c.want:
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestReadBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, []byte(`{"message":"`+strings.Repeat("x", MaxFile)+`"}`), 0o600)
	if _, err := Read(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized file: %v", err)
	}
	long := filepath.Join(dir, "long.json")
	os.WriteFile(long, []byte(`{"kind":"other","message":"`+strings.Repeat("y", MaxFile/2)+`"}`), 0o600)
	if r, err := Read(long); err != nil || len(r.Message) > MaxMessage {
		t.Errorf("a long message: %v, %d bytes kept", err, len(r.Message))
	}
	if _, err := Read(dir); err == nil {
		t.Errorf("a directory was read as a record")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		if _, err := Read(fifo); err == nil {
			t.Errorf("a FIFO was read as a record")
		}
	}
}
