package wire

import (
	"encoding/binary"
	"fmt"
	"reflect"

	"github.com/godist/godist/tensor"
)

// Encoder collects one body. Ctx is the caller's, for Extensions.
type Encoder struct {
	Ctx   any
	meta  []byte
	parts [][]byte // tensor data, with padding, after meta
	data  int      // bytes in parts
}

// Reset prepares e for a new body, keeping its buffers.
func (e *Encoder) Reset() {
	e.meta = append(e.meta[:0], 0, 0, 0, 0)
	clear(e.parts)
	e.parts = e.parts[:0]
	e.data = 0
}

// Encode appends v (whose type has a plan) to e.
func (e *Encoder) Encode(v any) error {
	if len(e.meta) < 4 {
		e.Reset()
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return fmt.Errorf("wire: cannot encode a nil interface")
	}
	p, err := planFor(rv.Type())
	if err != nil {
		return err
	}
	return p.enc(e, rv)
}

// EncodeValue appends the value rv points at or holds.
func (e *Encoder) EncodeValue(rv reflect.Value) error {
	if len(e.meta) < 4 {
		e.Reset()
	}
	p, err := planFor(rv.Type())
	if err != nil {
		return err
	}
	return p.enc(e, rv)
}

// Parts finishes the body and returns it as frame parts: the meta section
// (with prefix and padding), then the tensors' memory. The slices alias
// e's buffers and the tensors until the next Reset.
func (e *Encoder) Parts() [][]byte {
	binary.LittleEndian.PutUint32(e.meta, uint32(len(e.meta)-4))
	if pad := (8 - len(e.meta)%8) % 8; pad > 0 {
		e.meta = append(e.meta, zeros[:pad]...)
	}
	out := make([][]byte, 0, 1+len(e.parts))
	out = append(out, e.meta)
	return append(out, e.parts...)
}

// Len returns the body's length so far (without the final padding).
func (e *Encoder) Len() int { return len(e.meta) + e.data }

// Uvarint, Bytes and Byte let Extensions write their fields.
func (e *Encoder) Uvarint(x uint64) { e.meta = binary.AppendUvarint(e.meta, x) }
func (e *Encoder) Bytes(b []byte) {
	e.Uvarint(uint64(len(b)))
	e.meta = append(e.meta, b...)
}
func (e *Encoder) Byte(b byte) { e.meta = append(e.meta, b) }

// nilMarker writes the marker of the pointer v (0 for nil, 1 for a value
// that follows) and reports whether a value follows.
func (e *Encoder) nilMarker(v reflect.Value) bool {
	if v.IsNil() {
		e.Byte(0)
		return false
	}
	e.Byte(1)
	return true
}

// nilableLength writes the length of the slice or map v (0 for nil, else
// its length plus one) and returns its length and whether it is not nil.
func (e *Encoder) nilableLength(v reflect.Value) (int, bool) {
	if v.IsNil() {
		e.Uvarint(0)
		return 0, false
	}
	n := v.Len()
	e.Uvarint(uint64(n) + 1)
	return n, true
}

func (e *Encoder) tensor(t *tensor.Tensor) {
	if !t.IsContiguous() {
		t = t.Contiguous()
	}
	b := t.Bytes()
	e.parts = append(e.parts, b)
	e.data += len(b)
	if pad := (8 - len(b)%8) % 8; pad > 0 {
		e.parts = append(e.parts, zeros[:pad])
		e.data += pad
	}
}
