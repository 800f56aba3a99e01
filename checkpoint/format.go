package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/godist/godist/internal/crc32c"
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
//
// Save adds checksums to the metadata, as strings, so that every reader of
// the format still reads the file (see checksumKey).

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
	// Corrupt is set when a checksum does not match: the bytes are not
	// those that were written. The error then also wraps ErrCorrupt.
	Corrupt bool
}

// ErrCorrupt is wrapped by the *FormatError of a file whose checksums do
// not match its contents: a bit flipped on disk or in transit since Save
// wrote it.
var ErrCorrupt = errors.New("checkpoint: checksum mismatch: the file is corrupt")

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

// Unwrap returns ErrFormat, ErrCorrupt if Corrupt, and the underlying
// error, if any.
func (e *FormatError) Unwrap() []error {
	errs := []error{ErrFormat}
	if e.Corrupt {
		errs = append(errs, ErrCorrupt)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
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

// decodeEntry decodes one tensor's JSON object. Its field names must be
// spelled exactly, as the reference implementation requires; encoding/json
// alone would take "Dtype" for "dtype". Other fields are ignored.
func decodeEntry(dec *json.Decoder) (rawEntry, error) {
	var raw rawEntry
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return raw, err
	}
	for key, dst := range map[string]any{"dtype": &raw.DType, "shape": &raw.Shape, "data_offsets": &raw.DataOffsets} {
		if v, ok := fields[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return raw, err
			}
		}
	}
	return raw, nil
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
		raw, err := decodeEntry(dec)
		if err != nil {
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

// Checksums. Save stores two kinds in the header's "__metadata__", beside
// the caller's entries, each a CRC-32C (Castagnoli) written as 8 lowercase
// hex digits:
//
//	"godist.crc32c.NAME"  tensor NAME's bytes in the data section
//	"godist.crc32c"       the rest of the header (headerDigest): the
//	                      caller's metadata and every tensor's name,
//	                      dtype and shape
//
// Load checks them when the file has any (a file without, such as one
// written by PyTorch, loads unchecked) and returns the metadata without
// them. A file that has some must have all: a tensor without its checksum,
// a checksum without its tensor, or one that is not 8 lowercase hex
// digits, is corruption too. So a single flipped bit anywhere in the file
// is an error, except in a file without tensors, whose only checksum key a
// flip can turn into an ordinary metadata key.
const (
	checksumKey    = "godist.crc32c"
	checksumPrefix = checksumKey + "."
)

// isChecksumKey reports whether a metadata key is one of Save's checksums.
func isChecksumKey(k string) bool {
	return k == checksumKey || strings.HasPrefix(k, checksumPrefix)
}

// parseCRC parses exactly 8 lowercase hex digits: a flipped bit must not
// turn a checksum into another spelling of the same value.
func parseCRC(s string) (uint32, bool) {
	if len(s) != 8 {
		return 0, false
	}
	var c uint32
	for i := range len(s) {
		switch d := s[i]; {
		case '0' <= d && d <= '9':
			c = c<<4 | uint32(d-'0')
		case 'a' <= d && d <= 'f':
			c = c<<4 | uint32(d-'a'+10)
		default:
			return 0, false
		}
	}
	return c, true
}

// headerDigest returns the CRC-32C of what the header says besides the
// data offsets and the checksums, in this encoding (integers
// little-endian, str(s) being uint32 len(s) then the bytes of s):
//
//	uint32 len(meta), then str(key) str(value) for each entry by key
//	uint32 len(entries), then for each tensor by name:
//	    str(name) str(dtype name) uint32 len(shape) uint64 dim...
//
// meta holds no checksum keys. The offsets are left out: the loader's
// tiling check catches any change to them, and a tool that stores the
// tensors in another order keeps the digest.
func headerDigest(meta map[string]string, entries []entry) uint32 {
	var b []byte
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	keys := slices.Sorted(maps.Keys(meta))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		str(k)
		str(meta[k])
	}
	byName := slices.Clone(entries)
	slices.SortFunc(byName, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	b = binary.LittleEndian.AppendUint32(b, uint32(len(byName)))
	for _, e := range byName {
		str(e.name)
		dn, _ := dtypeName(e.dtype)
		str(dn)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.shape)))
		for _, s := range e.shape {
			b = binary.LittleEndian.AppendUint64(b, uint64(s))
		}
	}
	return crc32c.Checksum(b)
}

// withChecksums returns the metadata Save writes: the caller's, less any
// checksum keys of its own (a stale copy from a loaded file's metadata),
// plus the checksums of names' tensors ts (contiguous) and of the header.
func withChecksums(metadata map[string]string, names []string, ts []*tensor.Tensor) map[string]string {
	meta := make(map[string]string, len(metadata)+len(names)+1)
	for k, v := range metadata {
		if !isChecksumKey(k) {
			meta[k] = v
		}
	}
	entries := make([]entry, len(names))
	for i, t := range ts {
		entries[i] = entry{name: names[i], dtype: t.DType(), shape: t.Shape()}
	}
	digest := headerDigest(meta, entries)
	for i, t := range ts {
		meta[checksumPrefix+names[i]] = fmt.Sprintf("%08x", crc32c.Checksum(t.Bytes()))
	}
	meta[checksumKey] = fmt.Sprintf("%08x", digest)
	return meta
}

// corruptErr is the error for a checksum that does not match.
func corruptErr(name string, format string, args ...any) *FormatError {
	return &FormatError{Tensor: name, Problem: "the file is corrupt: " + fmt.Sprintf(format, args...), Corrupt: true}
}

// checkChecksums splits a loaded header's metadata into the caller's and
// the checksums, checks the header's, and returns the tensors' by name
// (nil when the file has no checksums: it loads unchecked) and the
// caller's metadata (nil when empty and the file had checksums, as Save
// was given nil).
func checkChecksums(meta map[string]string, entries []entry) (map[string]uint32, map[string]string, error) {
	has := false
	for k := range meta {
		if isChecksumKey(k) {
			has = true
			break
		}
	}
	if !has {
		return nil, meta, nil
	}
	user := map[string]string{}
	sums := map[string]uint32{}
	for k, v := range meta {
		if !isChecksumKey(k) {
			user[k] = v
			continue
		}
		if k == checksumKey {
			continue
		}
		c, ok := parseCRC(v)
		if !ok {
			return nil, nil, corruptErr(k[len(checksumPrefix):], "its checksum %s = %q is not 8 lowercase hex digits", k, v)
		}
		sums[k[len(checksumPrefix):]] = c
	}
	for _, e := range entries {
		if _, ok := sums[e.name]; !ok {
			return nil, nil, corruptErr(e.name, "it has no checksum %s%s, though the file has checksums", checksumPrefix, e.name)
		}
	}
	if len(sums) > len(entries) {
		var orphans []string
		for name := range sums {
			if !slices.ContainsFunc(entries, func(e entry) bool { return e.name == name }) {
				orphans = append(orphans, strconv.Quote(checksumPrefix+name))
			}
		}
		slices.Sort(orphans)
		return nil, nil, corruptErr("", "the metadata holds checksums %s of tensors the file lacks", strings.Join(orphans, ", "))
	}
	v, ok := meta[checksumKey]
	if !ok {
		return nil, nil, corruptErr("", "the metadata holds tensor checksums but not the header's, %s", checksumKey)
	}
	want, ok := parseCRC(v)
	if !ok {
		return nil, nil, corruptErr("", "the header's checksum %s = %q is not 8 lowercase hex digits", checksumKey, v)
	}
	if got := headerDigest(user, entries); got != want {
		return nil, nil, corruptErr("", "the header (metadata, tensor names, dtypes and shapes) has CRC-32C %08x, its checksum %s says %08x", got, checksumKey, want)
	}
	if len(user) == 0 {
		user = nil
	}
	return sums, user, nil
}

// checkData checks tensor e's bytes against its checksum, if sums has
// any.
func checkData(sums map[string]uint32, e entry, b []byte) error {
	if sums == nil {
		return nil
	}
	if got, want := crc32c.Checksum(b), sums[e.name]; got != want {
		return corruptErr(e.name, "its data has CRC-32C %08x, its checksum %s%s says %08x", got, checksumPrefix, e.name, want)
	}
	return nil
}
