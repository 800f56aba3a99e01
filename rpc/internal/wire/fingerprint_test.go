package wire

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// ping and pong are mutually recursive: each is on the other's cycle.
type ping struct {
	N    int
	Pong *pong
}

type pong struct {
	S    string
	Ping *ping
}

// pair holds the same list type twice, which is no cycle.
type pair struct{ A, B node }

// holder holds the other test types, so that building it builds theirs
// first.
type holder struct {
	I     int
	Ints  []int
	M     map[string][]int
	List  node
	Lists []node
	P     pair
	Ping  ping
	Pong  *pong
}

// fingerprintTypes are types whose plans share parts (int, []int, the
// list) or close cycles (the list, ping and pong).
var fingerprintTypes = []reflect.Type{
	reflect.TypeFor[int](),
	reflect.TypeFor[[]int](),
	reflect.TypeFor[map[string][]int](),
	reflect.TypeFor[struct {
		I    int
		Ints []int
	}](),
	reflect.TypeFor[node](),
	reflect.TypeFor[*node](),
	reflect.TypeFor[[]node](),
	reflect.TypeFor[pair](),
	reflect.TypeFor[ping](),
	reflect.TypeFor[*ping](),
	reflect.TypeFor[pong](),
	reflect.TypeFor[*pong](),
	reflect.TypeFor[holder](),
}

// fingerprintsIn returns the fingerprints of types, computed in that
// order after the process's plans are forgotten.
func fingerprintsIn(t *testing.T, types []reflect.Type) map[reflect.Type]uint64 {
	t.Helper()
	plans.Clear()
	fps := map[reflect.Type]uint64{}
	for _, typ := range types {
		fp, err := Fingerprint(typ)
		if err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		fps[typ] = fp
	}
	return fps
}

// TestFingerprintOrder: a type's fingerprint is the same whatever was
// built before it (two workers that built different types first once
// disagreed on a function's argument type, a struct with an int field
// before a []int field making []int's plan describe its int as
// recursive).
func TestFingerprintOrder(t *testing.T) {
	defer plans.Clear()
	alone := map[reflect.Type]uint64{}
	for _, typ := range fingerprintTypes {
		alone[typ] = fingerprintsIn(t, []reflect.Type{typ})[typ]
	}
	orders := [][]reflect.Type{fingerprintTypes, reversed(fingerprintTypes)}
	for seed := range uint64(5) {
		order := append([]reflect.Type(nil), fingerprintTypes...)
		rand.New(rand.NewPCG(seed, seed)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		orders = append(orders, order)
	}
	for _, order := range orders {
		got := fingerprintsIn(t, order)
		for _, typ := range fingerprintTypes {
			if got[typ] != alone[typ] {
				t.Errorf("computed in the order %v: %v's fingerprint is %#x, alone %#x", order, typ, got[typ], alone[typ])
			}
		}
	}
}

func reversed(ts []reflect.Type) []reflect.Type {
	out := make([]reflect.Type, len(ts))
	for i, typ := range ts {
		out[len(ts)-1-i] = typ
	}
	return out
}

// TestFingerprintDescription: a type met again inside a type that is not
// its own cycle is described in full; only a type met again inside
// itself is rec(T).
func TestFingerprintDescription(t *testing.T) {
	defer plans.Clear()
	list := "struct{V int64;Next *rec(wire.node);}"
	for typ, desc := range map[reflect.Type]string{
		reflect.TypeFor[struct {
			I    int
			Ints []int
		}](): "struct{I int64;Ints []int64;}",
		reflect.TypeFor[node]():  list,
		reflect.TypeFor[*node](): "*struct{V int64;Next rec(*wire.node);}",
		reflect.TypeFor[pair]():  "struct{A " + list + ";B " + list + ";}",
		reflect.TypeFor[ping]():  "struct{N int64;Pong *struct{S string;Ping *rec(wire.ping);};}",
		reflect.TypeFor[pong]():  "struct{S string;Ping *struct{N int64;Pong *rec(wire.pong);};}",
	} {
		plans.Clear()
		Fingerprint(reflect.TypeFor[holder]()) // the parts first
		fp, err := Fingerprint(typ)
		if err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		if want := hashString(desc); fp != want {
			t.Errorf("%v: fingerprint %#x, want %#x, that of %s", typ, fp, want, desc)
		}
	}
}

// TestMutualRecursion: mutually recursive types travel, and their plans
// built as parts of another type encode and decode them too.
func TestMutualRecursion(t *testing.T) {
	in := &ping{1, &pong{"a", &ping{2, &pong{"b", nil}}}}
	if out, _ := roundTrip(t, in); !reflect.DeepEqual(out, in) {
		t.Errorf("ping: got %+v", out)
	}
	h := holder{I: 1, Ints: []int{2}, List: node{3, &node{4, nil}}, P: pair{B: node{V: 5}}, Pong: &pong{"c", &ping{N: 6}}}
	if out, _ := roundTrip(t, h); !reflect.DeepEqual(out, h) {
		t.Errorf("holder: got %+v, want %+v", out, h)
	}
}
