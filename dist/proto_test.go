package dist

import (
	"errors"
	"math/bits"
	"reflect"
	"strings"
	"testing"
)

var ctlSamples = []control{
	{Kind: ctlProbe, Seq: 17, Got: 0xdeadbeefcafe},
	{Kind: ctlDown, Rank: 3, From: 5, Text: "transport: connection to rank 3 lost: EOF"},
	{Kind: ctlDesync, Seq: 1 << 40, Rank: 2, Got: 1, Want: 2},
	{Kind: ctlDesync, P2P: true, Seq: 5, Tag: 1 << 31, Rank: 0, Got: 3, Want: 4},
	{Kind: ctlAbort, From: 1 << 20, Text: "dist: all_reduce: size mismatch é"},
}

func TestControlRoundTrip(t *testing.T) {
	for _, m := range ctlSamples {
		b := m.encode()
		got, err := decodeControl(b)
		if err != nil || !reflect.DeepEqual(*got, m) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
		// Every truncation and every extension is refused.
		for n := range len(b) {
			if _, err := decodeControl(b[:n]); !errors.Is(err, errControl) {
				t.Fatalf("%v cut to %d bytes: %v", m.Kind, n, err)
			}
		}
		if _, err := decodeControl(append(b, 0)); !errors.Is(err, errControl) {
			t.Fatalf("%v with a byte more: %v", m.Kind, err)
		}
	}
	v := ctlSamples[0].encode()
	v[0] = ctlVersion + 1
	if _, err := decodeControl(v); err == nil || !strings.Contains(err.Error(), "same godist version") {
		t.Fatalf("another version: %v", err)
	}
	// A long text is cut at a rune boundary, and still decodes.
	long := control{Kind: ctlAbort, Text: strings.Repeat("é", maxCtlText)}
	got, err := decodeControl(long.encode())
	if err != nil || len(got.Text) > maxCtlText || !strings.HasPrefix(long.Text, got.Text) {
		t.Fatalf("long text: %d bytes, %v", len(got.Text), err)
	}
}

func FuzzDecodeControl(f *testing.F) {
	for _, m := range ctlSamples {
		f.Add(m.encode())
	}
	f.Add([]byte{ctlVersion, byte(ctlDown), 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeControl(data)
		if err != nil {
			if !errors.Is(err, errControl) {
				t.Fatalf("error %v does not wrap errControl", err)
			}
			return
		}
		if len(m.Text) > maxCtlText {
			t.Fatalf("accepted a text of %d bytes", len(m.Text))
		}
		if m2, err := decodeControl(m.encode()); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-encode: %+v, %v; want %+v", m2, err, m)
		}
		// Whatever decodes, the state machine takes without panicking.
		s := newCallState(0, 0, []int{0, 1, 2}, 0)
		s.control(1, m)
	})
}

// TestTellTargets checks the failure notice's overlay: from any member,
// relays reach every other within ⌈log₂n⌉ hops, and nobody sends more
// than 2⌈log₂n⌉.
func TestTellTargets(t *testing.T) {
	for n := 1; n <= 300; n++ {
		logn := bits.Len(uint(n - 1)) // ⌈log₂n⌉
		for src := range n {
			if got := tellTargets(src, n); len(got) > 2*logn {
				t.Fatalf("n=%d: member %d tells %d members, want at most %d", n, src, len(got), 2*logn)
			}
		}
		for _, src := range []int{0, n / 2, n - 1} {
			hops := map[int]int{src: 0}
			frontier := []int{src}
			for len(frontier) > 0 {
				var next []int
				for _, m := range frontier {
					for _, r := range tellTargets(m, n) {
						if r < 0 || r >= n || r == m {
							t.Fatalf("n=%d: member %d tells %d", n, m, r)
						}
						if _, ok := hops[r]; !ok {
							hops[r] = hops[m] + 1
							next = append(next, r)
						}
					}
				}
				frontier = next
			}
			if len(hops) != n {
				t.Fatalf("n=%d: from member %d the news reaches %d members", n, src, len(hops))
			}
			for r, h := range hops {
				if h > logn {
					t.Fatalf("n=%d: from member %d, member %d is %d relays away, want at most %d", n, src, r, h, logn)
				}
			}
		}
	}
}
