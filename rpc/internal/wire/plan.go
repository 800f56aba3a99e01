package wire

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"
)

// plan is how one type is encoded and decoded.
type plan struct {
	enc func(e *Encoder, v reflect.Value) error
	dec func(d *Decoder, v reflect.Value) error
	fp  uint64
	min int // fewest meta bytes a value takes
}

var plans sync.Map // reflect.Type → *plan

// planFor returns t's plan, built on first use with the plans of the
// types inside it, and cached for the process.
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

// fill makes p the plan of t and returns t's structural description. It
// picks the constructor for t's kind; a type with an encoding of its own
// (a tensor, an Extension, a BinaryMarshaler) is recognized before its
// kind is looked at.
func (b *builder) fill(p *plan, t reflect.Type) (string, error) {
	if desc, ok := customPlan(p, t); ok {
		return desc, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return boolPlan(p), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intPlan(p, t), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return uintPlan(p, t), nil
	case reflect.Float32:
		return float32Plan(p), nil
	case reflect.Float64:
		return float64Plan(p), nil
	case reflect.String:
		return stringPlan(p), nil
	case reflect.Slice:
		return b.slicePlan(p, t)
	case reflect.Array:
		return b.arrayPlan(p, t)
	case reflect.Map:
		return b.mapPlan(p, t)
	case reflect.Struct:
		return b.structPlan(p, t)
	case reflect.Pointer:
		return b.pointerPlan(p, t)
	}
	return "", fmt.Errorf("%w: %v (a %v: only data, tensors and remote references travel)", errNotEncoded, t, t.Kind())
}
