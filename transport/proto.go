package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/godist/godist/internal/crc32c"
)

// The frame format: every message between two ranks is one frame, a fixed
// 48-byte header followed by the payload.
//
//	off size field
//	  0    4 magic "GDTF"
//	  4    1 version
//	  5    1 kind
//	  6    1 shared-memory slot (KindShmData, KindShmMessage), else zero
//	  7    1 fragment flags (KindShmMessage): 4 a fragment, 1 more follow, 2 the first
//	  8    4 group id
//	 12    4 tag
//	 16    8 sequence number of the call in its group
//	 24    8 fingerprint of the call (op, dtype, count, root, reduce op)
//	 32    8 payload length in bytes
//	 40    4 CRC32C of the payload; zero for a payload in a shared-memory
//	         slot (KindShmData, KindShmMessage), which crosses no wire
//	 44    4 CRC32C of bytes 0..43
//
// All integers are little-endian. A frame is matched to a receive by its
// Key (group, sequence, tag) and its source rank.
const (
	frameMagic   = 0x46544447 // "GDTF" little-endian
	frameVersion = 3          // 2: shared-memory payloads carry no checksum; 3: heartbeats
	HeaderSize   = 48
	// MaxPayload bounds one frame's payload: a header claiming more is
	// refused before anything is allocated.
	MaxPayload = 1 << 40
	// MaxControl bounds a control frame's payload.
	MaxControl = 64 << 10
)

// Kind says what a frame carries.
type Kind uint8

const (
	// KindData carries the payload of a send.
	KindData Kind = 1
	// KindControl carries a message of the upper layer about the group
	// the key names (dist's control protocol: probes, failure notices),
	// at most MaxControl bytes.
	KindControl Kind = 2
	// KindBye announces a clean close: the connection ending afterwards is
	// not a failure.
	KindBye Kind = 3
	// KindShmData is a data frame whose payload is not on the stream but
	// in the shared-memory slot the header names (same-host peers).
	KindShmData Kind = 4
	// Kind 5 was a lent payload (removed; see region.go): refused.

	// KindMessage carries a message of a layer that keeps its own state
	// per message instead of posting receives (package rpc's requests,
	// replies and reference counting): delivered whole to
	// Endpoint.SetMessageHandler's handler, never matched to a receive.
	KindMessage Kind = 6
	// KindShmMessage is a KindMessage whose payload is in the
	// shared-memory slot the header names.
	KindShmMessage Kind = 7
	// KindHeartbeat carries nothing: a rank that has sent a peer nothing
	// for a while sends it one, so that the peer knows it lives
	// (heartbeat.go).
	KindHeartbeat Kind = 8
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindControl:
		return "control"
	case KindBye:
		return "bye"
	case KindShmData:
		return "shm-data"
	case KindMessage:
		return "message"
	case KindShmMessage:
		return "shm-message"
	case KindHeartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Key names a message within a job: the group, the call's sequence number
// in that group, and a tag that tells the messages of one call apart (the
// round and piece of a schedule, or the user's tag for point-to-point).
type Key struct {
	Group uint32
	Seq   uint64
	Tag   uint32
}

func (k Key) String() string { return fmt.Sprintf("group %d call %d tag %d", k.Group, k.Seq, k.Tag) }

// Header is a decoded frame header.
type Header struct {
	Kind Kind
	Key  Key
	// FP is the fingerprint of the sender's call; a receiver expecting a
	// different fingerprint has found a desync.
	FP  uint64
	Len int64
	CRC uint32 // CRC32C of the payload (zero in a shared-memory slot)
	// Slot is the shared-memory slot holding a KindShmData frame's payload.
	Slot uint8
	// Frag marks the fragments of a message larger than a slot, sent
	// through consecutive slots (FragMore, FragFirst); zero otherwise.
	Frag uint8
}

// Fragment flags.
const (
	FragMore  = 1 // more fragments of this message follow
	FragFirst = 2 // the first fragment: its payload starts with the total length
	FragPart  = 4 // set on every fragment
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C of the concatenated slices (with the
// AVX-512 carry-less-multiply kernel of internal/crc32c where the CPU has
// it: several times faster than hash/crc32 on frames that fit in cache).
func Checksum(parts ...[]byte) uint32 {
	var c uint32
	for _, p := range parts {
		c = crc32c.Update(c, p)
	}
	return c
}

// ErrFrame is wrapped by every error about a malformed frame.
var ErrFrame = errors.New("transport: malformed frame")

// encode writes h into b (len ≥ HeaderSize).
func (h *Header) encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4] = frameVersion
	b[5] = byte(h.Kind)
	b[6], b[7] = h.Slot, h.Frag
	binary.LittleEndian.PutUint32(b[8:], h.Key.Group)
	binary.LittleEndian.PutUint32(b[12:], h.Key.Tag)
	binary.LittleEndian.PutUint64(b[16:], h.Key.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.FP)
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Len))
	binary.LittleEndian.PutUint32(b[40:], h.CRC)
	binary.LittleEndian.PutUint32(b[44:], crc32.Checksum(b[:44], castagnoli))
}

// decodeHeader parses and checks a header. It never panics and never trusts
// a length beyond MaxPayload.
func decodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d header bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != frameMagic {
		return Header{}, fmt.Errorf("%w: bad magic %#x (not a godist peer, or the stream lost its place)", ErrFrame, m)
	}
	if got, want := binary.LittleEndian.Uint32(b[44:]), crc32.Checksum(b[:44], castagnoli); got != want {
		return Header{}, fmt.Errorf("%w: header checksum %#x, computed %#x", ErrFrame, got, want)
	}
	if b[4] != frameVersion {
		return Header{}, fmt.Errorf("%w: frame version %d, this build speaks %d: run the same godist version on every rank", ErrFrame, b[4], frameVersion)
	}
	h := Header{
		Kind: Kind(b[5]),
		Key: Key{
			Group: binary.LittleEndian.Uint32(b[8:]),
			Tag:   binary.LittleEndian.Uint32(b[12:]),
			Seq:   binary.LittleEndian.Uint64(b[16:]),
		},
		FP:   binary.LittleEndian.Uint64(b[24:]),
		CRC:  binary.LittleEndian.Uint32(b[40:]),
		Slot: b[6],
		Frag: b[7],
	}
	n := binary.LittleEndian.Uint64(b[32:])
	if n > MaxPayload {
		return Header{}, fmt.Errorf("%w: payload length %d exceeds %d", ErrFrame, n, uint64(MaxPayload))
	}
	h.Len = int64(n)
	switch h.Kind {
	case KindData, KindControl, KindBye, KindShmData, KindMessage, KindShmMessage:
	case KindHeartbeat:
		if h.Len != 0 {
			return Header{}, fmt.Errorf("%w: a heartbeat with %d payload bytes", ErrFrame, h.Len)
		}
	default:
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrFrame, b[5])
	}
	return h, nil
}
