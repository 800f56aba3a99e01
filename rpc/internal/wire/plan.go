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
	min int // fewest meta bytes a value takes

	typ      reflect.Type
	describe describer // typ's structure, for the fingerprint
	fp       uint64    // the fingerprint, set before the plan is cached
}

// describer writes a type's structure, given how to describe the plans
// of the types inside it.
type describer func(elem func(*plan) string) string

// leaf describes a type with no types inside it.
func leaf(desc string) describer {
	return func(func(*plan) string) string { return desc }
}

var plans sync.Map // reflect.Type → *plan

// planFor returns t's plan, built on first use with the plans of the
// types inside it, and cached for the process with theirs.
func planFor(t reflect.Type) (*plan, error) {
	if p, ok := plans.Load(t); ok {
		return p.(*plan), nil
	}
	b := &builder{plans: map[reflect.Type]*plan{}}
	p, err := b.build(t)
	if err != nil {
		return nil, err
	}
	for typ, q := range b.plans {
		q.fp = hashString(description(q))
		plans.LoadOrStore(typ, q)
	}
	got, _ := plans.LoadOrStore(t, p)
	return got.(*plan), nil
}

// builder makes the plans of one type and of the types inside it. It
// makes one plan per type and reuses it wherever the type occurs again,
// also inside itself, where the plan is still being filled in: that is
// how a recursive type's plan refers to itself. A failed build is
// dropped whole.
type builder struct {
	plans map[reflect.Type]*plan
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// build returns t's plan: the process's, this build's, or a new one.
func (b *builder) build(t reflect.Type) (*plan, error) {
	if p, ok := b.plans[t]; ok {
		return p, nil
	}
	if p, ok := plans.Load(t); ok {
		return p.(*plan), nil
	}
	p := &plan{typ: t}
	b.plans[t] = p
	describe, err := b.fill(p, t)
	if err != nil {
		return nil, err
	}
	p.describe = describe
	return p, nil
}

// description is the structure of p's type that its fingerprint hashes.
// It depends on that type alone, not on which plans were built before or
// are shared: the types inside it are written out in full wherever they
// occur, except that a type met again inside its own description (the
// cycle of a recursive type) is rec(T). Workers that built different
// types first must agree on every fingerprint.
func description(p *plan) string {
	open := map[reflect.Type]bool{} // the types being described
	var describe func(q *plan) string
	describe = func(q *plan) string {
		if open[q.typ] {
			return "rec(" + q.typ.String() + ")"
		}
		open[q.typ] = true
		defer delete(open, q.typ)
		return q.describe(describe)
	}
	return describe(p)
}

// fill makes p the plan of t and returns how t is described. It
// picks the constructor for t's kind; a type with an encoding of its own
// (a tensor, an Extension, a BinaryMarshaler) is recognized before its
// kind is looked at.
func (b *builder) fill(p *plan, t reflect.Type) (describer, error) {
	if desc, ok := customPlan(p, t); ok {
		return leaf(desc), nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return leaf(boolPlan(p)), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return leaf(intPlan(p, t)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return leaf(uintPlan(p, t)), nil
	case reflect.Float32:
		return leaf(float32Plan(p)), nil
	case reflect.Float64:
		return leaf(float64Plan(p)), nil
	case reflect.String:
		return leaf(stringPlan(p)), nil
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
	return nil, fmt.Errorf("%w: %v (a %v: only data, tensors and remote references travel)", errNotEncoded, t, t.Kind())
}
