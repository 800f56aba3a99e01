package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/godist/godist/tensor"
)

// The safetensors format (https://github.com/huggingface/safetensors):
//
//	8 bytes   N, little-endian uint64
//	N bytes   UTF-8 JSON object, padded with spaces (here to a multiple of 8):
//	          {"__metadata__": {"k": "v", ...},          (optional)
//	           "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...}
//	rest      the data section; tensor "name" is bytes [b, e) of it,
//	          little-endian, row-major. The ranges cover the section exactly.

// MaxHeaderSize bounds the JSON header (100 MB, as the reference
// implementation does).
const MaxHeaderSize = 100 << 20

const metadataKey = "__metadata__"

// dtypes maps the format's dtype names to tensor dtypes and back.
var dtypes = []struct {
	name string
	d    tensor.DType
}{
	{"F32", tensor.Float32},
	{"F64", tensor.Float64},
	{"I64", tensor.Int64},
	{"I32", tensor.Int32},
	{"U8", tensor.Uint8},
	{"BF16", tensor.BFloat16},
	{"F16", tensor.Float16},
}

func dtypeName(d tensor.DType) (string, bool) {
	for _, e := range dtypes {
		if e.d == d {
			return e.name, true
		}
	}
	return "", false
}

func parseDType(s string) (tensor.DType, bool) {
	for _, e := range dtypes {
		if e.name == s {
			return e.d, true
		}
	}
	return tensor.Invalid, false
}

// ErrFormat is wrapped by every error that reports malformed safetensors
// data.
var ErrFormat = errors.New("checkpoint: invalid safetensors data")

// FormatError describes malformed safetensors data. It wraps ErrFormat and,
// when there is one, the underlying error (io.ErrUnexpectedEOF for
// truncated data, a *json.SyntaxError, ...).
type FormatError struct {
	Tensor  string // the tensor concerned, or "" for the file as a whole
	Problem string
	Err     error
}

func (e *FormatError) Error() string {
	s := "checkpoint: invalid safetensors data: "
	if e.Tensor != "" {
		s += "tensor " + strconv.Quote(e.Tensor) + ": "
	}
	s += e.Problem
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrFormat and the underlying error, if any.
func (e *FormatError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrFormat, e.Err}
	}
	return []error{ErrFormat}
}

func formatErr(name string, err error, format string, args ...any) *FormatError {
	return &FormatError{Tensor: name, Problem: fmt.Sprintf(format, args...), Err: err}
}

// entry is one tensor as the header describes it, validated.
type entry struct {
	name       string
	dtype      tensor.DType
	shape      []int
	begin, end uint64
}

// rawEntry is one tensor's JSON.
type rawEntry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// encodeHeader returns the padded JSON header for the tensors, in the
// order given, and each tensor's byte length. The caller has checked the
// names and dtypes.
func encodeHeader(names []string, ts []*tensor.Tensor, metadata map[string]string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		sep()
		b.WriteString(`"__metadata__":`)
		m, _ := json.Marshal(metadata) // map[string]string: sorted keys, cannot fail
		b.Write(m)
	}
	var off uint64
	for i, name := range names {
		t := ts[i]
		dn, _ := dtypeName(t.DType())
		n := uint64(t.Numel() * t.DType().Size())
		sep()
		q, _ := json.Marshal(name)
		b.Write(q)
		b.WriteString(`:{"dtype":"`)
		b.WriteString(dn)
		b.WriteString(`","shape":[`)
		for j, s := range t.Shape() {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(s))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, off+n)
		off += n
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes()
}

// decodeHeader parses and validates a header. dataLen is the length of the
// data section if known, else -1. It returns the entries sorted by offset,
// the metadata (nil if none) and the length of the data section they
// cover.
func decodeHeader(h []byte, dataLen int64) ([]entry, map[string]string, uint64, error) {
	if len(h) == 0 || h[0] != '{' {
		return nil, nil, 0, formatErr("", nil, "header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, nil, 0, formatErr("", err, "header JSON")
	}
	var (
		entries []entry
		meta    map[string]string
		seen    = map[string]bool{}
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, 0, formatErr("", err, "header JSON")
		}
		name, ok := tok.(string)
		if !ok { // cannot happen inside an object, but be sure
			return nil, nil, 0, formatErr("", nil, "header JSON: key %v is not a string", tok)
		}
		if seen[name] {
			return nil, nil, 0, formatErr(name, nil, "appears twice in the header")
		}
		seen[name] = true
		if name == metadataKey {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, 0, formatErr("", err, "__metadata__ is not an object of strings")
			}
			continue
		}
		var raw rawEntry
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, 0, formatErr(name, err, "header entry")
		}
		e, err := checkEntry(name, raw)
		if err != nil {
			return nil, nil, 0, err
		}
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, nil, 0, formatErr("", err, "header JSON")
	}
	// Only the padding may follow the object.
	rest := h[dec.InputOffset():]
	if len(bytes.Trim(rest, " \t\r\n")) != 0 {
		return nil, nil, 0, formatErr("", nil, "%d bytes of trailing data after the header JSON", len(rest))
	}

	// The ranges must tile the data section: sorted by offset, each begins
	// where the previous ended. Empty tensors sit anywhere on a boundary.
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		return a.begin < b.begin || a.begin == b.begin && a.end < b.end
	})
	var at uint64
	for i, e := range entries {
		if e.begin != at {
			if e.begin < at {
				return nil, nil, 0, formatErr(e.name, nil, "data_offsets [%d, %d] overlap tensor %q, which ends at %d", e.begin, e.end, entries[i-1].name, at)
			}
			return nil, nil, 0, formatErr(e.name, nil, "data_offsets [%d, %d] leave a gap: the previous tensor ends at %d", e.begin, e.end, at)
		}
		at = e.end
	}
	if at > math.MaxInt64/2 {
		return nil, nil, 0, formatErr("", nil, "the tensors cover %d bytes, too many to load", at)
	}
	if dataLen >= 0 && at != uint64(dataLen) {
		return nil, nil, 0, formatErr("", nil, "the tensors cover %d bytes of data, the file holds %d", at, dataLen)
	}
	return entries, meta, at, nil
}

// checkEntry validates one tensor's header entry.
func checkEntry(name string, raw rawEntry) (entry, error) {
	e := entry{name: name}
	if raw.DType == nil || raw.Shape == nil || raw.DataOffsets == nil {
		return e, formatErr(name, nil, "header entry lacks dtype, shape or data_offsets")
	}
	d, ok := parseDType(*raw.DType)
	if !ok {
		return e, formatErr(name, nil, "dtype %q is not supported (want one of F32, F64, I64, I32, U8, BF16, F16)", *raw.DType)
	}
	e.dtype = d
	// The byte size, checked against overflow; the bound keeps it an int.
	size := uint64(d.Size())
	for _, s := range *raw.Shape {
		if s != 0 && size > math.MaxInt64/2/s {
			return e, formatErr(name, nil, "shape %v is too large", *raw.Shape)
		}
		size *= s
	}
	e.shape = make([]int, len(*raw.Shape))
	for i, s := range *raw.Shape {
		e.shape[i] = int(s)
	}
	if size == 0 { // any zero dimension
		for _, s := range *raw.Shape {
			if s > math.MaxInt32 {
				return e, formatErr(name, nil, "shape %v is too large", *raw.Shape)
			}
		}
	}
	off := *raw.DataOffsets
	if len(off) != 2 {
		return e, formatErr(name, nil, "data_offsets %v is not [begin, end]", off)
	}
	e.begin, e.end = off[0], off[1]
	if e.end < e.begin {
		return e, formatErr(name, nil, "data_offsets [%d, %d] end before they begin", e.begin, e.end)
	}
	if e.end-e.begin != size {
		return e, formatErr(name, nil, "data_offsets [%d, %d] hold %d bytes, but %s%v needs %d", e.begin, e.end, e.end-e.begin, *raw.DType, *raw.Shape, size)
	}
	return e, nil
}

// checkTensors validates a state dict for saving and returns its names
// sorted and the tensors, contiguous, in that order.
func checkTensors(tensors map[string]*tensor.Tensor) ([]string, []*tensor.Tensor, error) {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	slices.Sort(names)
	ts := make([]*tensor.Tensor, len(names))
	for i, name := range names {
		t := tensors[name]
		switch {
		case name == metadataKey:
			return nil, nil, fmt.Errorf("checkpoint: tensor name %q is reserved", name)
		case t == nil || !t.Sized():
			return nil, nil, fmt.Errorf("checkpoint: tensor %q is nil or unsized", name)
		}
		if _, ok := dtypeName(t.DType()); !ok {
			return nil, nil, fmt.Errorf("checkpoint: tensor %q: dtype %v has no safetensors name", name, t.DType())
		}
		ts[i] = t.Contiguous()
	}
	return names, ts, nil
}

// readHeaderLen reads the 8-byte header length and checks it against
// MaxHeaderSize and, when known (not -1), the bytes left.
func readHeaderLen(r io.Reader, left int64) (uint64, error) {
	var lb [8]byte
	if n, err := io.ReadFull(r, lb[:]); err != nil {
		return 0, readErr(err, "header length: got %d of 8 bytes", n)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderSize {
		return 0, formatErr("", nil, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if left >= 0 && n > uint64(left-8) {
		return 0, formatErr("", io.ErrUnexpectedEOF, "header length %d, but only %d bytes follow", n, left-8)
	}
	return n, nil
}

// readErr turns a read error into a FormatError when it is a truncation.
func readErr(err error, format string, args ...any) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return formatErr("", io.ErrUnexpectedEOF, "truncated "+format, args...)
	}
	return fmt.Errorf("checkpoint: reading "+format+": %w", append(args, err)...)
}
