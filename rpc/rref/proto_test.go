package rref

import (
	"bytes"
	"encoding"
	"errors"
	"testing"
)

var (
	_ encoding.BinaryAppender    = Msg{}
	_ encoding.BinaryMarshaler   = Msg{}
	_ encoding.BinaryUnmarshaler = (*Msg)(nil)
)

func sampleMsgs() []Msg {
	return []Msg{
		{Kind: ForkRequest, From: 1, To: 0, RRef: RRefID{2, 3}, Fork: ForkID{2, 4}},
		{Kind: ForkAccept, From: 0, To: 1, RRef: RRefID{2, 3}, Fork: ForkID{2, 4}},
		{Kind: ChildAccept, From: 1, To: 2, RRef: RRefID{2, 3}, Fork: ForkID{2, 4}},
		{Kind: UserDelete, From: 1<<31 - 1, To: -1, RRef: RRefID{-5, 1<<64 - 1}, Fork: ForkID{1<<31 - 1, 1}},
		{Kind: UserDelete, From: 1, To: 0, RRef: RRefID{2, 3}, Fork: ForkID{2, 4}, Forked: true},
	}
}

func TestMsgRoundTrip(t *testing.T) {
	for _, m := range sampleMsgs() {
		b, err := m.MarshalBinary()
		if err != nil || len(b) != MsgSize {
			t.Fatalf("%v: %d bytes, %v", m, len(b), err)
		}
		var got Msg
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if got != m {
			t.Fatalf("round trip: got %v, want %v", got, m)
		}
	}
}

func TestMsgUnmarshalErrors(t *testing.T) {
	good, _ := sampleMsgs()[0].MarshalBinary()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:MsgSize-1]},
		{"long", append(bytes.Clone(good), 0)},
		{"magic", edit(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"version", edit(func(b []byte) []byte { b[3] = protoVersion + 1; return b })},
		{"kind 0", edit(func(b []byte) []byte { b[4] = 0; return b })},
		{"kind high", edit(func(b []byte) []byte { b[4] = byte(numKinds); return b })},
		{"reserved", edit(func(b []byte) []byte { b[6] = 1; return b })},
		{"flag on ForkRequest", edit(func(b []byte) []byte { b[5] = flagForked; return b })},
		{"unknown flag", edit(func(b []byte) []byte { b[4], b[5] = byte(UserDelete), 2; return b })},
		{"zero rref", edit(func(b []byte) []byte { clear(b[20:28]); return b })},
		{"zero fork", edit(func(b []byte) []byte { clear(b[32:40]); return b })},
	} {
		m := Msg{Kind: UserDelete}
		err := m.UnmarshalBinary(tc.b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
		if m != (Msg{Kind: UserDelete}) {
			t.Errorf("%s: a failed Unmarshal changed the Msg to %v", tc.name, m)
		}
	}
}

// FuzzUnmarshal: decoding never panics, and what decodes re-encodes to
// the same bytes and is handled by a Table without panicking.
func FuzzUnmarshal(f *testing.F) {
	for _, m := range sampleMsgs() {
		b, _ := m.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(make([]byte, MsgSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Msg
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, _ := m.AppendBinary(nil)
		if !bytes.Equal(again, b) {
			t.Fatalf("%v re-encodes to %x, decoded from %x", m, again, b)
		}
		// A Table with some state takes any well-formed message.
		tab := NewTable(m.To)
		id, f := tab.NewOwned()
		_, _, _ = tab.CreateRemote(m.From)
		_, _ = tab.Fork(id, f, m.From)
		for _, out := range tab.Handle(m) {
			if out.From != m.To || out.To == m.To {
				t.Fatalf("%v answered with %v", m, out)
			}
		}
		tab.Handle(m)
		tab.Release(id, f)
		tab.PeerDown(m.From)
	})
}
