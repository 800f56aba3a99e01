package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a tensor.
type DType uint8

// The element types. Float32 is the working type; Float64 exists for
// gradient checks and parity tests; Int64 for labels and indices. Int32,
// Uint8, BFloat16 and Float16 exist at least as storage, so that every dtype
// a collective supports can be sent and converted.
const (
	Invalid DType = iota
	Float32
	Float64
	Int64
	Int32
	Uint8
	BFloat16
	Float16
)

var dtypeInfo = [...]struct {
	name string
	size int
}{
	Invalid:  {"invalid", 0},
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	Int64:    {"int64", 8},
	Int32:    {"int32", 4},
	Uint8:    {"uint8", 1},
	BFloat16: {"bfloat16", 2},
	Float16:  {"float16", 2},
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if int(d) >= len(dtypeInfo) {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns PyTorch's name of the dtype ("float32", "int64", ...).
func (d DType) String() string {
	if int(d) >= len(dtypeInfo) {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == BFloat16 || d == Float16
}

// ParseDType returns the dtype with PyTorch's name s.
func ParseDType(s string) (DType, error) {
	for i, in := range dtypeInfo {
		if i > 0 && in.name == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q", s)
}

// BFloat16FromFloat32 rounds f to bfloat16 (round to nearest even), as
// PyTorch does.
func BFloat16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f { // NaN: keep it a quiet NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16ToFloat32 widens a bfloat16 to float32 exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float16FromFloat32 rounds f to IEEE half precision (round to nearest
// even), with overflow to infinity and gradual underflow.
func Float16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 127+15: // overflow
		return sign | 0x7c00
	case exp >= 127-14: // normal half
		e := uint32(exp - 127 + 15)
		m := man >> 13
		rest := man & 0x1fff
		h := e<<10 | m
		if rest > 0x1000 || (rest == 0x1000 && m&1 == 1) {
			h++ // may carry into the exponent, which is right
		}
		return sign | uint16(h)
	case exp >= 127-25: // subnormal half
		m := man | 0x800000
		shift := uint32(126 - exp) // value = m·2^(exp-150) = h·2^-24
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	default:
		return sign
	}
}

// Float16ToFloat32 widens an IEEE half to float32 exactly.
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(man) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	}
}
