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

// The Encoder (encoder.go) and the Decoder (decoder.go) own the body's
// framing and its primitive fields. How a value of one type is written
// and read is that type's plan (plan.go), built once and cached, from one
// small constructor per kind of value: numbers, booleans and strings
// (plan_scalar.go); slices, arrays, maps, structs and pointers
// (plan_container.go); and values with an encoding of their own: tensors,
// Extensions and encoding.BinaryMarshalers (plan_custom.go).

import (
	"encoding"
	"errors"
	"reflect"

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

// Fingerprint returns the fingerprint of t's structure: the same on
// every side for types of the same shape (names of named types do not
// count, except where a recursive type refers to itself; field names
// do), whatever else each side encoded first.
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
