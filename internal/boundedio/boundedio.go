// Package boundedio reads lengths that came from untrusted input without
// trusting them: the IDX and safetensors readers use it.
package boundedio

import "io"

// ReadGrowing reads exactly n bytes, growing its buffer as data arrives
// rather than allocating n up front, so a header that claims more than the
// input holds costs little memory. On error it returns what it read.
func ReadGrowing(r io.Reader, n int) ([]byte, error) {
	const first = 1 << 20
	buf := make([]byte, 0, min(n, first))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
