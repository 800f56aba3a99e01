// Package tailbuf keeps the last bytes written to it: the end of a child
// process's stderr, for failure reports.
package tailbuf

import "sync"

// Buffer is an io.Writer that keeps the last Max bytes. It is safe for
// concurrent use.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
