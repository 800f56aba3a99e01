package store

// The TCP store's wire protocol. This file is all of it.
//
// A connection starts with the godist handshake (internal/handshake, Proto
// "store"). Then the client sends request frames and the server answers
// each with one response frame carrying the same id, in any order: a
// blocked GET or WAIT is answered when its keys exist, and later requests
// on the connection are served meanwhile. A CANCEL frame (id = the id of
// the GET or WAIT to give up) gets no answer, and neither does the request
// it cancels.
//
// Every frame, both ways, has a 21-byte header followed by a body:
//
//	magic/version uint32  protoMagic ("GDS" + version byte)
//	body length   uint32  ≤ maxBody
//	checksum      uint32  CRC-32C of id, kind/status and body
//	id            uint64  chosen by the client, echoed by the server
//	kind/status   uint8   a kind in requests, a status in responses
//
// All integers are big endian. Request bodies (key = uint16 length + bytes,
// ≤ MaxKeyLen; "rest" = the remaining bytes of the body, ≤ MaxValueLen):
//
//	SET      key, value (rest)
//	GET      key
//	ADD      key, delta int64
//	CAS      key, expected (uint32 length + bytes), desired (rest)
//	WAIT     count uint16 (≤ MaxWaitKeys), count × key
//	CHECK    count uint16 (≤ MaxWaitKeys), count × key
//	DELETE   key
//	NUMKEYS  (empty)
//	CANCEL   (empty)
//	PING     (empty)
//
// Response bodies with statusOK: GET the value; CAS one byte, 1 if the key
// exists and 0 if not, then the value stored; ADD and NUMKEYS an int64; CHECK and DELETE one byte, 0 or 1; the rest empty. With any other
// status the body is a UTF-8 message.
//
// A frame with a bad magic, an oversized length or a wrong checksum (a
// rewritten or corrupted packet) cannot be trusted or skipped, so the
// reader drops the connection, and the client's calls fail at once rather
// than wait for an answer that will not come. A well-framed request whose body does not
// decode gets statusBadRequest and the connection goes on.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/godist/godist/internal/crc32c"
)

const (
	protoVersion = 2
	protoMagic   = uint32('G')<<24 | uint32('D')<<16 | uint32('S')<<8 | protoVersion

	headerLen = 21

	// MaxKeyLen is the longest key, in bytes, any Store accepts.
	MaxKeyLen = 4096
	// MaxValueLen is the longest value, in bytes, any Store accepts.
	MaxValueLen = 64 << 20
	// MaxWaitKeys is the most keys one Wait or Check may name.
	MaxWaitKeys = 4096

	// maxBody bounds a frame body: a CAS with two values at the limit.
	maxBody = 2*MaxValueLen + MaxKeyLen + 64
	// firstChunk is a frame's first buffer; a body up to it is read
	// without asking the server's in-flight budget.
	firstChunk = 64 << 10
)

// kind is a request kind.
type kind uint8

const (
	kindSet kind = iota + 1
	kindGet
	kindAdd
	kindCAS
	kindWait
	kindCheck
	kindDelete
	kindNumKeys
	kindCancel
	kindPing
	kindLimit // not a kind: one past the last
)

var kindNames = [...]string{
	kindSet: "set", kindGet: "get", kindAdd: "add", kindCAS: "compare-and-set",
	kindWait: "wait", kindCheck: "check", kindDelete: "delete",
	kindNumKeys: "num-keys", kindCancel: "cancel", kindPing: "ping",
}

func (k kind) String() string {
	if k == 0 || k >= kindLimit {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// status is a response code.
type status uint8

const (
	statusOK         status = 0
	statusBadRequest status = 1 // the request did not decode or broke a limit
	statusNotInteger status = 2 // ADD on a value that is not a decimal integer
)

// request is a decoded request frame. Its slices alias the frame buffer.
type request struct {
	id      uint64
	kind    kind
	keys    []string // one key, or the keys of WAIT and CHECK
	value   []byte   // SET: the value; CAS: expected
	desired []byte   // CAS: desired
	delta   int64    // ADD
}

// response is a decoded response frame. body aliases the frame buffer.
type response struct {
	id     uint64
	status status
	body   []byte
}

var errFrame = errors.New("store: bad frame")

// appendFrame appends a whole frame: the header, with the checksum of id,
// k and body, then body.
func appendFrame(b []byte, id uint64, k uint8, body []byte) []byte {
	var h [headerLen]byte
	putHeader(h[:], id, k, body)
	return append(append(b, h[:]...), body...)
}

// putHeader writes the header of a frame with this body into h.
func putHeader(h []byte, id uint64, k uint8, body []byte) {
	binary.BigEndian.PutUint32(h[0:], protoMagic)
	binary.BigEndian.PutUint32(h[4:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[8:], frameSum(id, k, body))
	binary.BigEndian.PutUint64(h[12:], id)
	h[20] = k
}

// frameSum is the checksum of a frame's id, kind or status, and body.
func frameSum(id uint64, k uint8, body []byte) uint32 {
	var h [9]byte
	binary.BigEndian.PutUint64(h[:], id)
	h[8] = k
	return crc32c.Update(crc32c.Checksum(h[:]), body)
}

func appendKey(b []byte, k string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
	return append(b, k...)
}

// encodeRequest appends r's frame to b. The caller has checked the limits.
// The body is written in place after the header, so a value is copied
// once (a 64 MiB Set had been copied into a body and then into a frame).
func encodeRequest(b []byte, r *request) []byte {
	size := 0
	for _, k := range r.keys {
		size += 2 + len(k)
	}
	size += 12 + len(r.value) + len(r.desired)
	b = slices.Grow(b, headerLen+size)
	start := len(b)
	b = b[:start+headerLen]
	switch r.kind {
	case kindSet:
		b = appendKey(b, r.keys[0])
		b = append(b, r.value...)
	case kindGet, kindDelete:
		b = appendKey(b, r.keys[0])
	case kindAdd:
		b = appendKey(b, r.keys[0])
		b = binary.BigEndian.AppendUint64(b, uint64(r.delta))
	case kindCAS:
		b = appendKey(b, r.keys[0])
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.value)))
		b = append(b, r.value...)
		b = append(b, r.desired...)
	case kindWait, kindCheck:
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.keys)))
		for _, k := range r.keys {
			b = appendKey(b, k)
		}
	}
	putHeader(b[start:start+headerLen], r.id, uint8(r.kind), b[start+headerLen:])
	return b
}

// encodeResponse appends a response frame to b.
func encodeResponse(b []byte, id uint64, st status, body []byte) []byte {
	return appendFrame(b, id, uint8(st), body)
}

// readFrame reads one frame: header, then body. It allocates at most
// twice what the peer has sent (firstChunk at first), and never more
// than maxBody. An error here leaves the stream out of step: drop the
// connection.
func readFrame(r io.Reader) (id uint64, k uint8, body []byte, err error) {
	return readFrameReserving(r, nil)
}

// readFrameReserving is readFrame that first asks reserve for the bytes
// the header announces (when reserve is set and the body is larger than
// readBuffer is the read buffer of a connection, on both sides: a
// rendezvous' frames fit in it whole, so one read brings a header and its
// body (larger bodies are read straight into their own memory), at 1 KiB
// a connection.
const readBuffer = 1 << 10

// firstChunk); its error refuses the frame, out of step.
func readFrameReserving(r io.Reader, reserve func(n int) error) (id uint64, k uint8, body []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	if m := binary.BigEndian.Uint32(h[0:]); m != protoMagic {
		return 0, 0, nil, fmt.Errorf("%w: magic/version %#08x, want %#08x", errFrame, m, protoMagic)
	}
	n := int(binary.BigEndian.Uint32(h[4:]))
	if n > maxBody {
		return 0, 0, nil, fmt.Errorf("%w: body of %d bytes exceeds the limit of %d", errFrame, n, maxBody)
	}
	sum := binary.BigEndian.Uint32(h[8:])
	id = binary.BigEndian.Uint64(h[12:])
	if reserve != nil && n > firstChunk {
		if err := reserve(n); err != nil {
			return 0, 0, nil, fmt.Errorf("%w: %w", errFrame, err)
		}
	}
	// Memory follows the data that has arrived: a small first buffer,
	// doubled as it fills (never more than twice what arrived, so a peer
	// that claims a large body and sends little costs little memory; and
	// each byte is copied about once more, where growing by a fixed step
	// copied a 64 MiB value some 30 times over).
	body = make([]byte, 0, min(n, firstChunk))
	for len(body) < n {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(n, 2*cap(body)))
			copy(grown, body)
			body = grown
		}
		m, err := r.Read(body[len(body):min(cap(body), n)])
		body = body[:len(body)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if len(body) < n {
				return 0, 0, nil, err
			}
		}
	}
	if got := frameSum(id, h[20], body); got != sum {
		return 0, 0, nil, fmt.Errorf("%w: checksum %#08x, the frame's bytes give %#08x (corrupted or rewritten on the way)", errFrame, sum, got)
	}
	return id, h[20], body, nil
}

// readRequest reads and decodes one request. A non-nil *request with a
// non-nil error means the frame was well formed but its body was not: the
// server answers statusBadRequest and goes on. A nil request means the
// connection is out of step and must be dropped.
func readRequest(r io.Reader) (*request, error) {
	return readRequestReserving(r, nil)
}

func readRequestReserving(r io.Reader, reserve func(n int) error) (*request, error) {
	id, k, body, err := readFrameReserving(r, reserve)
	if err != nil {
		return nil, err
	}
	req := &request{id: id, kind: kind(k)}
	return req, decodeRequest(req, body)
}

func decodeRequest(req *request, body []byte) error {
	d := decoder{b: body}
	switch req.kind {
	case kindSet:
		req.keys = []string{d.key()}
		req.value = d.rest(MaxValueLen)
	case kindGet, kindDelete:
		req.keys = []string{d.key()}
	case kindAdd:
		req.keys = []string{d.key()}
		req.delta = int64(d.u64())
	case kindCAS:
		req.keys = []string{d.key()}
		req.value = d.bytes(int(d.u32()), MaxValueLen)
		req.desired = d.rest(MaxValueLen)
	case kindWait, kindCheck:
		n := int(d.u16())
		if n > MaxWaitKeys {
			return fmt.Errorf("%w: %d keys exceed the limit of %d", errFrame, n, MaxWaitKeys)
		}
		if d.err == nil && n*2 > len(d.b) {
			d.err = fmt.Errorf("%w: %d keys in %d bytes", errFrame, n, len(d.b))
		}
		if d.err == nil {
			req.keys = make([]string, n)
			for i := range req.keys {
				req.keys[i] = d.key()
			}
		}
	case kindNumKeys, kindCancel, kindPing:
	default:
		return fmt.Errorf("%w: unknown request kind %d", errFrame, uint8(req.kind))
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d stray bytes after a %v request", errFrame, len(d.b), req.kind)
	}
	return d.err
}

// decoder reads fields from a body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: truncated body", errFrame)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) key() string {
	n := int(d.u16())
	if d.err == nil && n > MaxKeyLen {
		d.err = fmt.Errorf("%w: key of %d bytes exceeds the limit of %d", errFrame, n, MaxKeyLen)
	}
	return string(d.take(n))
}

func (d *decoder) bytes(n, limit int) []byte {
	if d.err == nil && n > limit {
		d.err = fmt.Errorf("%w: value of %d bytes exceeds the limit of %d", errFrame, n, limit)
	}
	p := d.take(n)
	if p == nil && d.err == nil {
		p = []byte{}
	}
	return p
}

func (d *decoder) rest(limit int) []byte { return d.bytes(len(d.b), limit) }

// readResponse reads one response frame.
func readResponse(r io.Reader) (response, error) {
	id, st, body, err := readFrame(r)
	return response{id: id, status: status(st), body: body}, err
}

// decodeInt64 and decodeBool read the bodies of ADD/NUMKEYS and
// CHECK/DELETE responses.
func decodeInt64(body []byte) (int64, error) {
	if len(body) != 8 {
		return 0, fmt.Errorf("%w: integer response of %d bytes", errFrame, len(body))
	}
	return int64(binary.BigEndian.Uint64(body)), nil
}

func decodeBool(body []byte) (bool, error) {
	if len(body) != 1 || body[0] > 1 {
		return false, fmt.Errorf("%w: boolean response %x", errFrame, body)
	}
	return body[0] == 1, nil
}
