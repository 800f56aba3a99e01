package wire

import (
	"encoding"
	"fmt"
	"reflect"

	"github.com/godist/godist/tensor"
)

// customPlan makes p the plan of t when t has an encoding of its own,
// whatever its kind, and reports whether it has: a tensor (its elements
// go to the data section), one of the caller's Extensions, or an
// encoding.BinaryMarshaler.
func customPlan(p *plan, t reflect.Type) (string, bool) {
	switch {
	case t == tensorType:
		return tensorPlan(p), true
	case t.Kind() == reflect.Pointer && t.Implements(extType):
		return extensionPlan(p, t), true
	case isBinary(t):
		return binaryPlan(p, t), true
	}
	return "", false
}

// tensorPlan: a nil marker, or the dtype and shape in meta and the
// elements in the data section.
func tensorPlan(p *plan) string {
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
	return "tensor"
}

// extensionPlan: a nil marker, then what the value's EncodeWire writes.
func extensionPlan(p *plan, t reflect.Type) string {
	elem := t.Elem()
	p.min = 1
	p.enc = func(e *Encoder, v reflect.Value) error {
		if !e.nilMarker(v) {
			return nil
		}
		return v.Interface().(Extension).EncodeWire(e)
	}
	p.dec = func(d *Decoder, v reflect.Value) error {
		if ok, err := d.nilMarker(v); !ok || err != nil {
			return err
		}
		nv := reflect.New(elem)
		if err := nv.Interface().(Extension).DecodeWire(d); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	}
	return "ext(" + elem.Name() + ")"
}

// isBinary reports whether t is a value type whose pointer both marshals
// and unmarshals itself (time.Time, say).
func isBinary(t reflect.Type) bool {
	return t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && reflect.PointerTo(t).Implements(binMarshaler) && reflect.PointerTo(t).Implements(binUnmarshal)
}

// binaryPlan: the bytes MarshalBinary returns.
func binaryPlan(p *plan, t reflect.Type) string {
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
	return "bin(" + t.String() + ")"
}
