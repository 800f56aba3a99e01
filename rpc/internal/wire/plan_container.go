package wire

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// The plans of slices, arrays, maps, structs and pointers. Each builds
// its elements' plans first. Each decoder that descends into elements
// counts a level of nesting against MaxDepth, and a claimed length is
// checked against the bytes left before anything is allocated.

// arrayPlan: the elements, no length.
func (b *builder) arrayPlan(p *plan, t reflect.Type) (describer, error) {
	ep, err := b.build(t.Elem())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", t, err)
	}
	n := t.Len()
	p.min = n * ep.min
	p.enc = func(e *Encoder, v reflect.Value) error {
		return encodeElems(e, ep, v, n)
	}
	p.dec = nested(func(d *Decoder, v reflect.Value) error {
		return decodeElems(d, ep, v, n)
	})
	return func(elem func(*plan) string) string {
		return fmt.Sprintf("[%d]%s", n, elem(ep))
	}, nil
}

// mapPlan: 0 for nil, else the number of entries plus one, then each key
// and value.
func (b *builder) mapPlan(p *plan, t reflect.Type) (describer, error) {
	kp, err := b.build(t.Key())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", t, err)
	}
	vp, err := b.build(t.Elem())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", t, err)
	}
	p.min = 1
	per := max(kp.min+vp.min, 0)
	p.enc = func(e *Encoder, v reflect.Value) error {
		if _, ok := e.nilableLength(v); !ok {
			return nil
		}
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
	p.dec = nested(func(d *Decoder, v reflect.Value) error {
		n, ok, err := d.nilableLength(v, per)
		if !ok || err != nil {
			return err
		}
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
	})
	return func(elem func(*plan) string) string {
		return "map[" + elem(kp) + "]" + elem(vp)
	}, nil
}

// structPlan: the exported fields in order.
func (b *builder) structPlan(p *plan, t reflect.Type) (describer, error) {
	type field struct {
		index int
		name  string
		p     *plan
	}
	var fields []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fp, err := b.build(f.Type)
		if err != nil {
			return nil, fmt.Errorf("field %s of %v: %w", f.Name, t, err)
		}
		fields = append(fields, field{i, f.Name, fp})
		p.min += fp.min
	}
	if len(fields) == 0 && t.NumField() > 0 {
		// Only unexported fields: it would travel empty (an
		// *autograd.Var, a mutex), which is never what was meant.
		return nil, fmt.Errorf("%w: %v has no exported fields, so nothing of it would travel", errNotEncoded, t)
	}
	p.enc = func(e *Encoder, v reflect.Value) error {
		for _, f := range fields {
			if err := f.p.enc(e, v.Field(f.index)); err != nil {
				return err
			}
		}
		return nil
	}
	p.dec = nested(func(d *Decoder, v reflect.Value) error {
		for _, f := range fields {
			if err := f.p.dec(d, v.Field(f.index)); err != nil {
				return err
			}
		}
		return nil
	})
	return func(elem func(*plan) string) string {
		var desc strings.Builder
		desc.WriteString("struct{")
		for _, f := range fields {
			desc.WriteString(f.name + " " + elem(f.p) + ";")
		}
		desc.WriteString("}")
		return desc.String()
	}, nil
}

// pointerPlan: a nil marker, then the value pointed to.
func (b *builder) pointerPlan(p *plan, t reflect.Type) (describer, error) {
	ep, err := b.build(t.Elem())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", t, err)
	}
	elem := t.Elem()
	p.min = 1
	p.enc = func(e *Encoder, v reflect.Value) error {
		if !e.nilMarker(v) {
			return nil
		}
		return ep.enc(e, v.Elem())
	}
	p.dec = func(d *Decoder, v reflect.Value) error {
		if ok, err := d.nilMarker(v); !ok || err != nil {
			return err
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
	return func(elem func(*plan) string) string {
		return "*" + elem(ep)
	}, nil
}

// slicePlan: 0 for nil, else the length plus one, then the elements; a
// slice of fixed-size numbers copies its memory instead
// (numericSlicePlan).
func (b *builder) slicePlan(p *plan, t reflect.Type) (describer, error) {
	p.min = 1
	if travelsAsMemory(t.Elem()) {
		return leaf(numericSlicePlan(p, t)), nil
	}
	ep, err := b.build(t.Elem())
	if err != nil {
		return nil, fmt.Errorf("%v: %w", t, err)
	}
	p.enc = func(e *Encoder, v reflect.Value) error {
		n, ok := e.nilableLength(v)
		if !ok {
			return nil
		}
		return encodeElems(e, ep, v, n)
	}
	p.dec = nested(func(d *Decoder, v reflect.Value) error {
		n, ok, err := d.nilableLength(v, ep.min)
		if !ok || err != nil {
			return err
		}
		s := reflect.MakeSlice(t, n, n)
		if err := decodeElems(d, ep, s, n); err != nil {
			return err
		}
		v.Set(s)
		return nil
	})
	return func(elem func(*plan) string) string {
		return "[]" + elem(ep)
	}, nil
}

// encodeElems encodes the first n elements of the slice or array v.
func encodeElems(e *Encoder, ep *plan, v reflect.Value, n int) error {
	for i := range n {
		if err := ep.enc(e, v.Index(i)); err != nil {
			return err
		}
	}
	return nil
}

// decodeElems fills the first n elements of the slice or array v.
func decodeElems(d *Decoder, ep *plan, v reflect.Value, n int) error {
	for i := range n {
		if err := ep.dec(d, v.Index(i)); err != nil {
			return err
		}
	}
	return nil
}

// travelsAsMemory reports whether a slice of t travels as its memory: t
// is a number of fixed size (int, uint and uintptr are not) that does not
// marshal itself.
func travelsAsMemory(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Uint8, reflect.Float32, reflect.Float64, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64, reflect.Int16, reflect.Uint16, reflect.Int8:
		return t != tensorType && !reflect.PointerTo(t).Implements(binMarshaler)
	}
	return false
}

// numericSlicePlan: 0 for nil, else the length plus one, then the
// elements' memory (little-endian on every platform godist builds for).
func numericSlicePlan(p *plan, t reflect.Type) string {
	size := int(t.Elem().Size())
	p.enc = func(e *Encoder, v reflect.Value) error {
		n, ok := e.nilableLength(v)
		if ok && n > 0 {
			e.meta = append(e.meta, unsafeBytes(v, n*size)...)
		}
		return nil
	}
	p.dec = func(d *Decoder, v reflect.Value) error {
		n, ok, err := d.nilableLength(v, size)
		if !ok || err != nil {
			return err
		}
		s := reflect.MakeSlice(t, n, n)
		if n > 0 {
			copy(unsafeBytes(s, n*size), d.meta[:n*size])
			d.meta = d.meta[n*size:]
		}
		v.Set(s)
		return nil
	}
	return fmt.Sprintf("[]%s", t.Elem().Kind())
}

// unsafeBytes is the memory of the first nb bytes of slice v's elements
// (fixed-size numbers: little-endian, as every platform godist builds for
// stores them).
func unsafeBytes(v reflect.Value, nb int) []byte {
	return unsafe.Slice((*byte)(v.UnsafePointer()), nb)
}
