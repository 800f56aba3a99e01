package wire

import (
	"encoding/binary"
	"fmt"
	"reflect"

	"github.com/godist/godist/tensor"
)

// Decoder reads one body. Ctx is the caller's, for Extensions.
type Decoder struct {
	Ctx   any
	body  []byte
	meta  []byte // unread meta
	data  []byte // unread data section
	depth int
}

// NewDecoder checks body's framing and returns a decoder over it. body
// must start 8-byte aligned for its tensors to be used in place (the
// transport's message buffers are).
func NewDecoder(body []byte, ctx any) (*Decoder, error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, less than the meta length", ErrMalformed, len(body))
	}
	n := uint64(binary.LittleEndian.Uint32(body))
	if n > uint64(len(body)-4) {
		return nil, fmt.Errorf("%w: meta of %d bytes in a body of %d", ErrMalformed, n, len(body))
	}
	end := 4 + int(n)
	dataStart := (end + 7) &^ 7
	if dataStart > len(body) {
		dataStart = len(body)
	}
	return &Decoder{Ctx: ctx, body: body, meta: body[4:end], data: body[dataStart:]}, nil
}

// Decode fills the value ptr points to.
func (d *Decoder) Decode(ptr any) error {
	rv := reflect.ValueOf(ptr)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("wire: Decode needs a non-nil pointer, got %T", ptr)
	}
	return d.DecodeValue(rv.Elem())
}

// DecodeValue fills the settable value rv.
func (d *Decoder) DecodeValue(rv reflect.Value) (err error) {
	p, err := planFor(rv.Type())
	if err != nil {
		return err
	}
	return p.dec(d, rv)
}

// Finish checks that the whole body was read.
func (d *Decoder) Finish() error {
	if len(d.meta) != 0 {
		return fmt.Errorf("%w: %d meta bytes left over", ErrMalformed, len(d.meta))
	}
	if len(d.data) != 0 {
		return fmt.Errorf("%w: %d data bytes left over", ErrMalformed, len(d.data))
	}
	return nil
}

// Uvarint, Bytes and Byte let Extensions read their fields.
func (d *Decoder) Uvarint() (uint64, error) {
	x, n := binary.Uvarint(d.meta)
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad varint", ErrMalformed)
	}
	d.meta = d.meta[n:]
	return x, nil
}

func (d *Decoder) Bytes() ([]byte, error) {
	n, err := d.Uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.meta)) {
		return nil, fmt.Errorf("%w: %d bytes claimed, %d left", ErrMalformed, n, len(d.meta))
	}
	b := d.meta[:n:n]
	d.meta = d.meta[n:]
	return b, nil
}

func (d *Decoder) Byte() (byte, error) {
	if len(d.meta) == 0 {
		return 0, fmt.Errorf("%w: body ends early", ErrMalformed)
	}
	b := d.meta[0]
	d.meta = d.meta[1:]
	return b, nil
}

func (d *Decoder) varint() (int64, error) {
	x, n := binary.Varint(d.meta)
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad varint", ErrMalformed)
	}
	d.meta = d.meta[n:]
	return x, nil
}

func (d *Decoder) fixed(n int) ([]byte, error) {
	if len(d.meta) < n {
		return nil, fmt.Errorf("%w: body ends early", ErrMalformed)
	}
	b := d.meta[:n]
	d.meta = d.meta[n:]
	return b, nil
}

// length reads a length of elements each at least min bytes long.
func (d *Decoder) length(min int) (int, error) {
	n, err := d.Uvarint()
	if err != nil {
		return 0, err
	}
	if err := d.room(n, min); err != nil {
		return 0, err
	}
	return int(n), nil
}

// nilableLength reads the length of the slice or map v as encoded (0 for
// nil, else the number of elements plus one, each at least min bytes
// long) and returns the number of elements and whether v is not nil;
// when it is nil, v is set to nil.
func (d *Decoder) nilableLength(v reflect.Value, min int) (int, bool, error) {
	n, err := d.Uvarint()
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		v.SetZero()
		return 0, false, nil
	}
	if err := d.room(n-1, min); err != nil {
		return 0, false, err
	}
	return int(n - 1), true, nil
}

// room checks that the unread meta has room for n elements each at least
// min bytes long (for elements that take no bytes, that n is at most
// maxZeroSizeElems).
func (d *Decoder) room(n uint64, min int) error {
	limit := uint64(maxZeroSizeElems)
	if min > 0 {
		limit = uint64(len(d.meta) / min)
	}
	if n > limit {
		return fmt.Errorf("%w: %d elements claimed, the body has room for %d", ErrMalformed, n, limit)
	}
	return nil
}

// nilMarker reads the marker of the pointer v and reports whether a
// value follows (1); when none does (0), it sets v to nil.
func (d *Decoder) nilMarker(v reflect.Value) (bool, error) {
	flag, err := d.Byte()
	if err != nil {
		return false, err
	}
	switch flag {
	case 0:
		v.SetZero()
		return false, nil
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("%w: pointer flag %d", ErrMalformed, flag)
}

func (d *Decoder) tensor() (*tensor.Tensor, error) {
	dt, err := d.Byte()
	if err != nil {
		return nil, err
	}
	dtype := tensor.DType(dt)
	if dtype.Size() == 0 || dtype == tensor.Invalid {
		return nil, fmt.Errorf("%w: tensor dtype %d", ErrMalformed, dt)
	}
	nd, err := d.length(1)
	if err != nil {
		return nil, err
	}
	if nd > 32 {
		return nil, fmt.Errorf("%w: tensor of %d dimensions", ErrMalformed, nd)
	}
	shape := make([]int, nd)
	n := uint64(1)
	for i := range shape {
		s, err := d.Uvarint()
		if err != nil {
			return nil, err
		}
		if s > uint64(len(d.data)) && s != 0 {
			return nil, fmt.Errorf("%w: tensor dimension %d larger than the data", ErrMalformed, s)
		}
		shape[i] = int(s)
		n *= s
		if n > uint64(len(d.data)) {
			n = uint64(len(d.data)) + 1 // too big: stays too big, never overflows
		}
	}
	nb := n * uint64(dtype.Size())
	padded := (nb + 7) &^ 7
	if padded > uint64(len(d.data)) {
		return nil, fmt.Errorf("%w: tensor %v%v needs %d data bytes, %d left", ErrMalformed, dtype, shape, nb, len(d.data))
	}
	b := d.data[:nb:nb]
	d.data = d.data[padded:]
	t, err := tensor.Alias(dtype, b, shape...)
	if err != nil {
		// Not aligned (a body not from the transport): copy.
		t = tensor.FromBytes(dtype, b, shape...)
	}
	return t, nil
}

func (d *Decoder) enter() error {
	d.depth++
	if d.depth > MaxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrMalformed, MaxDepth)
	}
	return nil
}

func (d *Decoder) leave() { d.depth-- }

// nested is dec counting one level of nesting against MaxDepth.
func nested(dec func(d *Decoder, v reflect.Value) error) func(d *Decoder, v reflect.Value) error {
	return func(d *Decoder, v reflect.Value) error {
		if err := d.enter(); err != nil {
			return err
		}
		defer d.leave()
		return dec(d, v)
	}
}
