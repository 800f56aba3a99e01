// Package wire is the RPC framework's codec: it turns a Go value of a type
// known on both sides into the parts of one frame and back, with the
// tensors inside the value sent from their own memory and received in
// place (no copy into or out of an intermediate buffer).
//
// A body is
//
//	u32  length of the meta section (little-endian)
//	meta the value, field by field, in the order of its type's plan
//	pad  zeros up to a multiple of 8
//	data each tensor's elements, in the order they occur in meta, each
//	     padded with zeros to a multiple of 8
//
// Meta encodes booleans as a byte, integers as (zig-zag) varints,
// floats as their IEEE bits (little-endian), strings and byte slices as a
// length and the bytes, slices and maps as a length and the elements
// (a nil slice, map or pointer is marked apart from an empty one), structs
// as their exported fields in order, types that implement
// encoding.BinaryMarshaler (time.Time, say) as their bytes, and a tensor
// as its dtype and shape (its elements go to the data section).
// Interfaces, functions and channels cannot be encoded: no code and no
// type chosen by the sender ever crosses the wire. Unexported fields are
// skipped, as encoding/gob and encoding/json do; a struct whose fields are
// all unexported is refused, since it would travel empty.
//
// Both sides compute a fingerprint of the type's structure (Fingerprint);
// the RPC layer sends it with the call, so that a caller and a callee that
// disagree on a type fail with an error naming both fingerprints rather
// than decoding garbage.
//
// Decoding is for hostile input: every length is checked against the
// bytes left before anything is allocated, nesting is bounded, and a
// malformed body is an error, never a panic.
package wire

import (
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"sync"
	"unsafe"

	"github.com/godist/godist/tensor"
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("wire: malformed body")

// MaxDepth bounds the nesting of pointers, slices, maps and structs that
// a decoder follows.
const MaxDepth = 64

// maxZeroSizeElems bounds the length of a slice or map whose elements
// take no bytes (struct{}), which the bytes left cannot bound.
const maxZeroSizeElems = 1 << 20

// Extension is implemented (on a pointer type) by values that encode
// themselves with the help of the caller's context: the RPC framework's
// remote references, which must be forked as they are sent and registered
// as they arrive.
type Extension interface {
	EncodeWire(e *Encoder) error
	DecodeWire(d *Decoder) error
}

var (
	extType       = reflect.TypeFor[Extension]()
	tensorType    = reflect.TypeFor[*tensor.Tensor]()
	binMarshaler  = reflect.TypeFor[encoding.BinaryMarshaler]()
	binUnmarshal  = reflect.TypeFor[encoding.BinaryUnmarshaler]()
	zeros         [8]byte
	errNotEncoded = errors.New("wire: type cannot be encoded")
)

// Encoder collects one body. Ctx is the caller's, for Extensions.
type Encoder struct {
	Ctx   any
	meta  []byte
	parts [][]byte // tensor data, with padding, after meta
	data  int      // bytes in parts
	// Tensors that had to be made contiguous are kept alive here.
}

// Decoder reads one body. Ctx is the caller's, for Extensions.
type Decoder struct {
	Ctx   any
	body  []byte
	meta  []byte // unread meta
	data  []byte // unread data section
	depth int
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
	limit := uint64(maxZeroSizeElems)
	if min > 0 {
		limit = uint64(len(d.meta) / min)
	}
	if n > limit {
		return 0, fmt.Errorf("%w: %d elements claimed, the body has room for %d", ErrMalformed, n, limit)
	}
	return int(n), nil
}

// nilableLength reads the length of a slice or map as encoded: 0 for
// nil, else the number of elements plus one (returned as it is), each at
// least min bytes long.
func (d *Decoder) nilableLength(min int) (int, error) {
	n, err := d.Uvarint()
	if err != nil || n == 0 {
		return 0, err
	}
	limit := uint64(maxZeroSizeElems)
	if min > 0 {
		limit = uint64(len(d.meta) / min)
	}
	if n-1 > limit {
		return 0, fmt.Errorf("%w: %d elements claimed, the body has room for %d", ErrMalformed, n-1, limit)
	}
	return int(n), nil
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

// Fingerprint returns the fingerprint of t's structure: the same on
// every side for types of the same shape (names of named types do not
// count; field names do).
func Fingerprint(t reflect.Type) (uint64, error) {
	p, err := planFor(t)
	if err != nil {
		return 0, err
	}
	return p.fp, nil
}

// Check says whether values of t can be encoded, naming the part that
// cannot.
func Check(t reflect.Type) error {
	_, err := planFor(t)
	return err
}

// plan is how one type is encoded and decoded.
type plan struct {
	enc func(e *Encoder, v reflect.Value) error
	dec func(d *Decoder, v reflect.Value) error
	fp  uint64
	min int // fewest meta bytes a value takes
}

var plans sync.Map // reflect.Type → *plan

func planFor(t reflect.Type) (*plan, error) {
	if p, ok := plans.Load(t); ok {
		return p.(*plan), nil
	}
	b := &builder{inProgress: map[reflect.Type]*plan{}}
	p, _, err := b.build(t)
	if err != nil {
		return nil, err
	}
	for typ, q := range b.inProgress {
		plans.LoadOrStore(typ, q)
	}
	got, _ := plans.LoadOrStore(t, p)
	return got.(*plan), nil
}

type builder struct {
	inProgress map[reflect.Type]*plan
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// build returns t's plan and its structural description (for the
// fingerprint).
func (b *builder) build(t reflect.Type) (*plan, string, error) {
	if p, ok := b.inProgress[t]; ok {
		// A recursive type: the description names the recursion.
		return p, "rec(" + t.String() + ")", nil
	}
	p := &plan{}
	b.inProgress[t] = p
	desc, err := b.fill(p, t)
	if err != nil {
		delete(b.inProgress, t)
		return nil, "", err
	}
	p.fp = hashString(desc)
	return p, desc, nil
}

func (b *builder) fill(p *plan, t reflect.Type) (string, error) {
	if t == tensorType {
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.IsNil() {
				e.Byte(0)
				return nil
			}
			tt := v.Interface().(*tensor.Tensor)
			shape := tt.Shape()
			e.Byte(byte(tt.DType()))
			e.Uvarint(uint64(len(shape)))
			for _, s := range shape {
				e.Uvarint(uint64(s))
			}
			e.tensor(tt)
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			if len(d.meta) > 0 && d.meta[0] == 0 {
				d.meta = d.meta[1:]
				v.SetZero()
				return nil
			}
			tt, err := d.tensor()
			if err != nil {
				return err
			}
			v.Set(reflect.ValueOf(tt))
			return nil
		}
		return "tensor", nil
	}
	if t.Kind() == reflect.Pointer && t.Implements(extType) {
		elem := t.Elem()
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.IsNil() {
				e.Byte(0)
				return nil
			}
			e.Byte(1)
			return v.Interface().(Extension).EncodeWire(e)
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			flag, err := d.Byte()
			if err != nil {
				return err
			}
			switch flag {
			case 0:
				v.SetZero()
				return nil
			case 1:
			default:
				return fmt.Errorf("%w: pointer flag %d", ErrMalformed, flag)
			}
			nv := reflect.New(elem)
			if err := nv.Interface().(Extension).DecodeWire(d); err != nil {
				return err
			}
			v.Set(nv)
			return nil
		}
		return "ext(" + elem.Name() + ")", nil
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(binMarshaler) && reflect.PointerTo(t).Implements(binUnmarshal) {
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			var m encoding.BinaryMarshaler
			if v.CanAddr() {
				m = v.Addr().Interface().(encoding.BinaryMarshaler)
			} else {
				c := reflect.New(t)
				c.Elem().Set(v)
				m = c.Interface().(encoding.BinaryMarshaler)
			}
			bs, err := m.MarshalBinary()
			if err != nil {
				return err
			}
			e.Bytes(bs)
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			bs, err := d.Bytes()
			if err != nil {
				return err
			}
			if err := v.Addr().Interface().(encoding.BinaryUnmarshaler).UnmarshalBinary(bs); err != nil {
				return fmt.Errorf("%w: %v: %v", ErrMalformed, t, err)
			}
			return nil
		}
		return "bin(" + t.String() + ")", nil
	}
	switch t.Kind() {
	case reflect.Bool:
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.Bool() {
				e.Byte(1)
			} else {
				e.Byte(0)
			}
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			c, err := d.Byte()
			if err != nil {
				return err
			}
			if c > 1 {
				return fmt.Errorf("%w: bool %d", ErrMalformed, c)
			}
			v.SetBool(c == 1)
			return nil
		}
		return "bool", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.min = 1
		bits := t.Bits()
		p.enc = func(e *Encoder, v reflect.Value) error {
			e.meta = binary.AppendVarint(e.meta, v.Int())
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			x, err := d.varint()
			if err != nil {
				return err
			}
			if v.OverflowInt(x) {
				return fmt.Errorf("%w: %d overflows int%d", ErrMalformed, x, bits)
			}
			v.SetInt(x)
			return nil
		}
		return fmt.Sprintf("int%d", bits), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		p.min = 1
		bits := t.Bits()
		p.enc = func(e *Encoder, v reflect.Value) error {
			e.Uvarint(v.Uint())
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			x, err := d.Uvarint()
			if err != nil {
				return err
			}
			if v.OverflowUint(x) {
				return fmt.Errorf("%w: %d overflows uint%d", ErrMalformed, x, bits)
			}
			v.SetUint(x)
			return nil
		}
		return fmt.Sprintf("uint%d", bits), nil
	case reflect.Float32:
		p.min = 4
		p.enc = func(e *Encoder, v reflect.Value) error {
			e.meta = binary.LittleEndian.AppendUint32(e.meta, math.Float32bits(float32(v.Float())))
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			b, err := d.fixed(4)
			if err != nil {
				return err
			}
			v.SetFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
			return nil
		}
		return "float32", nil
	case reflect.Float64:
		p.min = 8
		p.enc = func(e *Encoder, v reflect.Value) error {
			e.meta = binary.LittleEndian.AppendUint64(e.meta, math.Float64bits(v.Float()))
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			b, err := d.fixed(8)
			if err != nil {
				return err
			}
			v.SetFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)))
			return nil
		}
		return "float64", nil
	case reflect.String:
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			s := v.String()
			e.Uvarint(uint64(len(s)))
			e.meta = append(e.meta, s...)
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			b, err := d.Bytes()
			if err != nil {
				return err
			}
			v.SetString(string(b))
			return nil
		}
		return "string", nil
	case reflect.Slice:
		return b.slice(p, t)
	case reflect.Array:
		ep, edesc, err := b.build(t.Elem())
		if err != nil {
			return "", fmt.Errorf("%v: %w", t, err)
		}
		n := t.Len()
		p.min = n * ep.min
		p.enc = func(e *Encoder, v reflect.Value) error {
			for i := range n {
				if err := ep.enc(e, v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			if err := d.enter(); err != nil {
				return err
			}
			defer d.leave()
			for i := range n {
				if err := ep.dec(d, v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Sprintf("[%d]%s", n, edesc), nil
	case reflect.Map:
		kp, kdesc, err := b.build(t.Key())
		if err != nil {
			return "", fmt.Errorf("%v: %w", t, err)
		}
		vp, vdesc, err := b.build(t.Elem())
		if err != nil {
			return "", fmt.Errorf("%v: %w", t, err)
		}
		p.min = 1
		per := max(kp.min+vp.min, 0)
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.IsNil() {
				e.Uvarint(0)
				return nil
			}
			e.Uvarint(uint64(v.Len()) + 1)
			it := v.MapRange()
			for it.Next() {
				if err := kp.enc(e, it.Key()); err != nil {
					return err
				}
				if err := vp.enc(e, it.Value()); err != nil {
					return err
				}
			}
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			if err := d.enter(); err != nil {
				return err
			}
			defer d.leave()
			n, err := d.nilableLength(per)
			if err != nil {
				return err
			}
			if n == 0 {
				v.SetZero()
				return nil
			}
			n--
			m := reflect.MakeMapWithSize(t, n)
			k := reflect.New(t.Key()).Elem()
			e := reflect.New(t.Elem()).Elem()
			for range n {
				k.SetZero()
				e.SetZero()
				if err := kp.dec(d, k); err != nil {
					return err
				}
				if err := vp.dec(d, e); err != nil {
					return err
				}
				m.SetMapIndex(k, e)
			}
			v.Set(m)
			return nil
		}
		return "map[" + kdesc + "]" + vdesc, nil
	case reflect.Struct:
		type field struct {
			index int
			p     *plan
		}
		var fields []field
		desc := "struct{"
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fp, fdesc, err := b.build(f.Type)
			if err != nil {
				return "", fmt.Errorf("field %s of %v: %w", f.Name, t, err)
			}
			fields = append(fields, field{i, fp})
			p.min += fp.min
			desc += f.Name + " " + fdesc + ";"
		}
		if len(fields) == 0 && t.NumField() > 0 {
			// Only unexported fields: it would travel empty (an
			// *autograd.Var, a mutex), which is never what was meant.
			return "", fmt.Errorf("%w: %v has no exported fields, so nothing of it would travel", errNotEncoded, t)
		}
		p.enc = func(e *Encoder, v reflect.Value) error {
			for _, f := range fields {
				if err := f.p.enc(e, v.Field(f.index)); err != nil {
					return err
				}
			}
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			if err := d.enter(); err != nil {
				return err
			}
			defer d.leave()
			for _, f := range fields {
				if err := f.p.dec(d, v.Field(f.index)); err != nil {
					return err
				}
			}
			return nil
		}
		return desc + "}", nil
	case reflect.Pointer:
		ep, edesc, err := b.build(t.Elem())
		if err != nil {
			return "", fmt.Errorf("%v: %w", t, err)
		}
		elem := t.Elem()
		p.min = 1
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.IsNil() {
				e.Byte(0)
				return nil
			}
			e.Byte(1)
			return ep.enc(e, v.Elem())
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			flag, err := d.Byte()
			if err != nil {
				return err
			}
			switch flag {
			case 0:
				v.SetZero()
				return nil
			case 1:
			default:
				return fmt.Errorf("%w: pointer flag %d", ErrMalformed, flag)
			}
			if err := d.enter(); err != nil {
				return err
			}
			defer d.leave()
			nv := reflect.New(elem)
			if err := ep.dec(d, nv.Elem()); err != nil {
				return err
			}
			v.Set(nv)
			return nil
		}
		return "*" + edesc, nil
	}
	return "", fmt.Errorf("%w: %v (a %v: only data, tensors and remote references travel)", errNotEncoded, t, t.Kind())
}

func (b *builder) slice(p *plan, t reflect.Type) (string, error) {
	p.min = 1
	switch t.Elem().Kind() {
	case reflect.Uint8, reflect.Float32, reflect.Float64, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Int16, reflect.Uint16, reflect.Int8:
		if t.Elem() == tensorType || reflect.PointerTo(t.Elem()).Implements(binMarshaler) {
			break
		}
		// Fixed-size numbers travel as their memory.
		size := int(t.Elem().Size())
		p.enc = func(e *Encoder, v reflect.Value) error {
			if v.IsNil() {
				e.Uvarint(0)
				return nil
			}
			n := v.Len()
			e.Uvarint(uint64(n) + 1)
			if n > 0 {
				e.meta = append(e.meta, unsafeBytes(v, n*size)...)
			}
			return nil
		}
		p.dec = func(d *Decoder, v reflect.Value) error {
			n, err := d.Uvarint()
			if err != nil {
				return err
			}
			if n == 0 {
				v.SetZero()
				return nil
			}
			n--
			if n > uint64(len(d.meta)/size) {
				return fmt.Errorf("%w: %d elements claimed, the body has room for %d", ErrMalformed, n, len(d.meta)/size)
			}
			s := reflect.MakeSlice(t, int(n), int(n))
			if n > 0 {
				copy(unsafeBytes(s, int(n)*size), d.meta[:int(n)*size])
				d.meta = d.meta[int(n)*size:]
			}
			v.Set(s)
			return nil
		}
		return fmt.Sprintf("[]%s", t.Elem().Kind()), nil
	}
	ep, edesc, err := b.build(t.Elem())
	if err != nil {
		return "", fmt.Errorf("%v: %w", t, err)
	}
	p.enc = func(e *Encoder, v reflect.Value) error {
		if v.IsNil() {
			e.Uvarint(0)
			return nil
		}
		n := v.Len()
		e.Uvarint(uint64(n) + 1)
		for i := range n {
			if err := ep.enc(e, v.Index(i)); err != nil {
				return err
			}
		}
		return nil
	}
	p.dec = func(d *Decoder, v reflect.Value) error {
		if err := d.enter(); err != nil {
			return err
		}
		defer d.leave()
		n, err := d.nilableLength(ep.min)
		if err != nil {
			return err
		}
		if n == 0 {
			v.SetZero()
			return nil
		}
		n--
		s := reflect.MakeSlice(t, n, n)
		for i := range n {
			if err := ep.dec(d, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	return "[]" + edesc, nil
}

func (d *Decoder) enter() error {
	d.depth++
	if d.depth > MaxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrMalformed, MaxDepth)
	}
	return nil
}

func (d *Decoder) leave() { d.depth-- }

// unsafeBytes is the memory of the first nb bytes of slice v's elements
// (fixed-size numbers: little-endian, as every platform godist builds for
// stores them).
func unsafeBytes(v reflect.Value, nb int) []byte {
	return unsafe.Slice((*byte)(v.UnsafePointer()), nb)
}
