package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
)

// The plans of numbers, booleans and strings: meta only, bounded by the
// type (a decoded integer that overflows it is malformed).

// boolPlan: one byte, 0 or 1.
func boolPlan(p *plan) string {
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
	return "bool"
}

// intPlan: a zig-zag varint.
func intPlan(p *plan, t reflect.Type) string {
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
	return fmt.Sprintf("int%d", bits)
}

// uintPlan: a varint.
func uintPlan(p *plan, t reflect.Type) string {
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
	return fmt.Sprintf("uint%d", bits)
}

// float32Plan: the IEEE bits, little-endian.
func float32Plan(p *plan) string {
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
	return "float32"
}

// float64Plan: the IEEE bits, little-endian.
func float64Plan(p *plan) string {
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
	return "float64"
}

// stringPlan: a length and the bytes.
func stringPlan(p *plan) string {
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
	return "string"
}
