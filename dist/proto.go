package dist

// The process group's control protocol. This file is all of it.
//
// Besides the frames of their calls, the members of a group tell each
// other about the group itself: a member that has waited long in a
// collective probes the peer it waits for, and a member that fails the
// group tells the others why. These messages travel as the payload of the
// transport's control frames (transport.KindControl), whose key carries
// the group id; the transport checks their CRC and bounds their length
// (64 KiB). The payload, all integers little endian:
//
//	off size field
//	  0    1 version (ctlVersion)
//	  1    1 kind
//	  2    1 flags: bit 0 = the desync is of a point-to-point stream
//	  3    1 reserved (zero)
//	  4    4 rank   down: the lost rank; desync: the rank whose frame was
//	                unlike (global ranks)
//	  8    4 tag    desync of a point-to-point stream: its tag
//	 12    8 seq    probe, desync: the collective's sequence number, or
//	                the stream's message number
//	 20    8 got    probe: the prober's fingerprint; desync: the
//	                unlike frame's
//	 28    8 want   desync: the fingerprint the reporter expected
//	 36    2 text length (≤ maxCtlText)
//	 38    4 from   down, desync, abort: the rank that saw it first (global)
//	 42    n text   down: the cause; abort: the reason (UTF-8)
//
// Kinds:
//
//	probe   "I have waited for you in collective seq, fingerprint got":
//	        the receiver fails the group if its own collective seq has
//	        another fingerprint, and otherwise says nothing.
//	down    "rank lost is gone, because text": the receiver fails the
//	        group naming that rank.
//	desync  "rank sent a frame with fingerprint got where from expected
//	        want": the receiver fails the group with a DesyncError.
//	abort   "from failed the group: text".
//
// A member that fails the group tells the members at distance ±1, ±2,
// ±4, ... from it (tellTargets), not every member: at W ranks that would
// be W² messages and, with connections made on first use, W²
// connections. Each member that fails the group on a down, desync or
// abort passes the message on, unchanged, to its own, so that the news
// reaches every member within log₂W relays, around members that are
// gone; and a member that connects later to one whose group has failed is
// told then (the transport's PeerUp).
//
// A message that does not decode (another version, an unknown kind, a
// bad length) is dropped: control messages only ever make a group fail
// sooner, never succeed, so losing one costs time, not correctness.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

const (
	ctlVersion = 2
	ctlHeader  = 42
	// maxCtlText bounds a control message's text.
	maxCtlText = 4096
)

// ctlKind says what a control message is.
type ctlKind uint8

const (
	ctlProbe ctlKind = iota + 1
	ctlDown
	ctlDesync
	ctlAbort
)

func (k ctlKind) String() string {
	switch k {
	case ctlProbe:
		return "probe"
	case ctlDown:
		return "down"
	case ctlDesync:
		return "desync"
	case ctlAbort:
		return "abort"
	}
	return fmt.Sprintf("control(%d)", uint8(k))
}

// control is a decoded control message.
type control struct {
	Kind ctlKind
	P2P  bool
	Rank int
	Tag  uint32
	Seq  uint64
	Got  uint64
	Want uint64
	From int
	Text string
}

// errControl is wrapped by every error about a malformed control message.
var errControl = errors.New("dist: malformed control message")

// encode returns m's wire form; a text over maxCtlText is cut at a rune
// boundary.
func (m *control) encode() []byte {
	text := m.Text
	if len(text) > maxCtlText {
		cut := maxCtlText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	b := make([]byte, ctlHeader+len(text))
	b[0] = ctlVersion
	b[1] = byte(m.Kind)
	if m.P2P {
		b[2] = 1
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(int32(m.Rank)))
	binary.LittleEndian.PutUint32(b[8:], m.Tag)
	binary.LittleEndian.PutUint64(b[12:], m.Seq)
	binary.LittleEndian.PutUint64(b[20:], m.Got)
	binary.LittleEndian.PutUint64(b[28:], m.Want)
	binary.LittleEndian.PutUint16(b[36:], uint16(len(text)))
	binary.LittleEndian.PutUint32(b[38:], uint32(int32(m.From)))
	copy(b[ctlHeader:], text)
	return b
}

// decodeControl parses a control message. It never panics, and checks
// every field it will use.
func decodeControl(b []byte) (*control, error) {
	if len(b) < ctlHeader {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", errControl, len(b), ctlHeader)
	}
	if b[0] != ctlVersion {
		return nil, fmt.Errorf("%w: version %d, this build speaks %d: run the same godist version on every rank", errControl, b[0], ctlVersion)
	}
	m := &control{
		Kind: ctlKind(b[1]),
		P2P:  b[2]&1 != 0,
		Rank: int(int32(binary.LittleEndian.Uint32(b[4:]))),
		Tag:  binary.LittleEndian.Uint32(b[8:]),
		Seq:  binary.LittleEndian.Uint64(b[12:]),
		Got:  binary.LittleEndian.Uint64(b[20:]),
		Want: binary.LittleEndian.Uint64(b[28:]),
		From: int(int32(binary.LittleEndian.Uint32(b[38:]))),
	}
	if b[2]&^1 != 0 || b[3] != 0 {
		return nil, fmt.Errorf("%w: flags %#x %#x", errControl, b[2], b[3])
	}
	switch m.Kind {
	case ctlProbe, ctlDown, ctlDesync, ctlAbort:
	default:
		return nil, fmt.Errorf("%w: unknown kind %d", errControl, b[1])
	}
	n := int(binary.LittleEndian.Uint16(b[36:]))
	if n > maxCtlText || ctlHeader+n != len(b) {
		return nil, fmt.Errorf("%w: text of %d bytes in a message of %d", errControl, n, len(b))
	}
	if (m.Kind == ctlDown || m.Kind == ctlDesync) && m.Rank < 0 {
		return nil, fmt.Errorf("%w: %v naming rank %d", errControl, m.Kind, m.Rank)
	}
	if m.Kind != ctlProbe && m.From < 0 {
		return nil, fmt.Errorf("%w: %v from rank %d", errControl, m.Kind, m.From)
	}
	text := b[ctlHeader:]
	if !utf8.Valid(text) {
		return nil, fmt.Errorf("%w: text is not UTF-8", errControl)
	}
	m.Text = string(text)
	return m, nil
}

// tellTargets returns the group ranks member me of n tells of a failure:
// those at distance ±2^k (mod n) for each 2^k < n, without repeats. From
// any member every other is reached within ⌈log₂n⌉ relays (a distance is
// a sum of powers of two), and each member sends at most 2⌈log₂n⌉.
func tellTargets(me, n int) []int {
	var out []int
	for d := 1; d < n; d *= 2 {
		for _, r := range [2]int{(me + d) % n, (me - d + n) % n} {
			if r != me && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}
