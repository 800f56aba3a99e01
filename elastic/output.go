package elastic

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Std says which of a worker's streams go to files (torchrun's
// --redirects and --tee): none, stdout, stderr or both.
type Std int

const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdBoth Std = 3
)

func (s Std) has(which Std) bool { return s > 0 && s&which != 0 }

// Streams is a Std for every local rank, with exceptions.
type Streams struct {
	Default Std
	PerRank map[int]Std // by local rank
}

// For returns the Std of a local rank.
func (s Streams) For(localRank int) Std {
	if v, ok := s.PerRank[localRank]; ok {
		return v
	}
	return s.Default
}

// IsSet reports whether any stream is set.
func (s Streams) IsSet() bool { return s.Default > 0 || len(s.PerRank) > 0 }

// ParseStreams parses torchrun's syntax: "3" for every local rank, or
// "0:1,1:2" per local rank (the others get none).
func ParseStreams(text string) (Streams, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return Streams{}, nil
	}
	parse := func(v string) (Std, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 3 {
			return 0, fmt.Errorf("%q is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", v)
		}
		return Std(n), nil
	}
	if !strings.Contains(text, ":") {
		d, err := parse(text)
		return Streams{Default: d}, err
	}
	s := Streams{PerRank: map[int]Std{}}
	for part := range strings.SplitSeq(text, ",") {
		k, v, _ := strings.Cut(part, ":")
		r, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || r < 0 {
			return s, fmt.Errorf("%q: want LOCAL_RANK:STD pairs such as 0:1,1:3", part)
		}
		if s.PerRank[r], err = parse(v); err != nil {
			return s, err
		}
	}
	return s, nil
}

// console serializes whole lines from every worker onto one writer.
type console struct {
	mu sync.Mutex
	w  io.Writer
}

func (c *console) writeLine(prefix string, line []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.w, prefix)
	c.w.Write(line)
	if len(line) == 0 || line[len(line)-1] != '\n' {
		io.WriteString(c.w, "\n")
	}
}

// lineTail keeps the last n lines written to it.
type lineTail struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (t *lineTail) add(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, strings.TrimRight(string(line), "\r\n"))
	if len(t.lines) > t.n {
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-t.n:]...)
	}
}

func (t *lineTail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// lineWriter splits a worker's stream into lines and sends each to the
// console with a prefix (when con is set), to a file (when file is set)
// and to a tail (when tail is set). exec.Cmd's copying goroutine is the
// only writer; flush runs after Wait.
type lineWriter struct {
	prefix string
	con    *console
	file   io.Writer
	tail   *lineTail
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.file != nil {
		w.file.Write(p)
	}
	if w.con == nil && w.tail == nil {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i+1])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a very long line: pass it on in pieces
		w.line(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *lineWriter) line(l []byte) {
	if w.con != nil {
		w.con.writeLine(w.prefix, l)
	}
	if w.tail != nil {
		w.tail.add(l)
	}
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = nil
	}
}
