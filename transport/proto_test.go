package transport

import (
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Kind: KindData, Key: Key{Group: 7, Seq: 1 << 40, Tag: 3}, FP: 0xdeadbeefcafe, Len: 12345, CRC: Checksum([]byte("x"))}
	var b [HeaderSize]byte
	h.encode(b[:])
	got, err := decodeHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("decode: %+v, %v; want %+v", got, err, h)
	}
	for i := range HeaderSize {
		c := b
		c[i] ^= 0x10
		if _, err := decodeHeader(c[:]); !errors.Is(err, ErrFrame) {
			t.Fatalf("flipped bit in byte %d not detected: %v", i, err)
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Kind: KindControl, Len: 5}).encode(b[:])
	f.Add(b[:])
	f.Add([]byte("GDTF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeader(data)
		if err != nil {
			return
		}
		if h.Len < 0 || h.Len > MaxPayload {
			t.Fatalf("accepted length %d", h.Len)
		}
		var re [HeaderSize]byte
		h.encode(re[:])
		if h2, err := decodeHeader(re[:]); err != nil || h2 != h {
			t.Fatalf("re-encode: %+v %v", h2, err)
		}
	})
}
