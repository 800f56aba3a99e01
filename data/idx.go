package data

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/godist/godist/internal/boundedio"
	"github.com/godist/godist/tensor"
)

// The IDX format (LeCun's MNIST files): a magic word 0x00 0x00 <type>
// <ndim>, ndim big-endian uint32 dimensions, then the elements, big-endian,
// row-major.
const (
	idxUint8   = 0x08
	idxInt8    = 0x09
	idxInt16   = 0x0B
	idxInt32   = 0x0C
	idxFloat32 = 0x0D
	idxFloat64 = 0x0E

	maxIDXDims = 32
)

// MaxIDXBytes bounds the size of the tensor an IDX header may declare
// (4 GiB, counted in the dtype it decodes to: int8 and int16 data as
// int32). A larger claim is rejected before anything is allocated.
// Memory is otherwise allocated as data arrives, so a corrupt header on a
// short stream costs at most about twice the stream's length.
const MaxIDXBytes uint64 = 1 << 32

// ErrIDX is wrapped by every error ReadIDX returns for malformed data (a bad
// magic word, an unknown type, absurd or truncated dimensions, truncated or
// trailing data). Truncation errors also wrap io.ErrUnexpectedEOF.
var ErrIDX = errors.New("data: invalid IDX data")

// ReadIDX reads one IDX array from r and returns it as a new contiguous
// tensor with the array's dimensions: uint8 data as Uint8, int8, int16 and
// int32 data as Int32 (widened), float32 as Float32 and float64 as Float64.
//
// A stream that starts with the gzip magic (1f 8b) is decompressed first;
// the compressed stream must then hold exactly one IDX array (trailing
// bytes are an error, and the gzip checksum is verified). An uncompressed
// stream is read up to the end of the array and no further.
//
// Malformed data gives an error wrapping ErrIDX; errors from r are returned
// wrapped.
func ReadIDX(r io.Reader) (*tensor.Tensor, error) {
	return readIDX(r, -1, MaxIDXBytes)
}

// ReadIDXLimited is ReadIDX with a tighter bound than MaxIDXBytes on the
// tensor a header may declare: a caller that knows about how large its
// data is (a dataset loader) refuses a header claiming more before
// reading or inflating any data, so a small gzip file cannot make it
// decompress and hold gigabytes of zeros.
func ReadIDXLimited(r io.Reader, maxBytes int64) (*tensor.Tensor, error) {
	return readIDX(r, -1, min(uint64(max(maxBytes, 0)), MaxIDXBytes))
}

// ReadIDXFile is ReadIDX on the named file (gzip-compressed or not). For an
// uncompressed file the declared size is checked against the file's length
// before any allocation, and trailing bytes are an error.
func ReadIDXFile(path string) (*tensor.Tensor, error) {
	return ReadIDXFileLimited(path, int64(MaxIDXBytes))
}

// ReadIDXFileLimited is ReadIDXFile with ReadIDXLimited's bound.
func ReadIDXFileLimited(path string, maxBytes int64) (*tensor.Tensor, error) {
	limit := min(uint64(max(maxBytes, 0)), MaxIDXBytes)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	t, err := readIDX(f, size, limit)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// readIDX reads an IDX array; size, when not -1, is the length of the whole
// (possibly compressed) stream.
func readIDX(r io.Reader, size int64, limit uint64) (*tensor.Tensor, error) {
	var magic [4]byte
	if n, err := io.ReadFull(r, magic[:]); err != nil {
		if n == 0 && err == io.EOF {
			return nil, fmt.Errorf("%w: empty stream", ErrIDX)
		}
		return nil, readErr("magic word", n, 4, err)
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(io.MultiReader(bytes.NewReader(magic[:]), r))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrIDX, err)
		}
		defer zr.Close()
		br := bufio.NewReader(zr)
		if n, err := io.ReadFull(br, magic[:]); err != nil {
			return nil, readErr("magic word", n, 4, err)
		}
		t, err := readIDXBody(br, magic, -1, limit)
		if err != nil {
			return nil, err
		}
		// Read to the end so that trailing data is seen and gzip verifies
		// its checksum.
		n, err := io.Copy(io.Discard, br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrIDX, err)
		}
		if n > 0 {
			return nil, fmt.Errorf("%w: %d bytes of trailing data after the array", ErrIDX, n)
		}
		return t, nil
	}
	rest := int64(-1)
	if size >= 0 {
		rest = size - 4
	}
	t, err := readIDXBody(r, magic, rest, limit)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// readIDXBody reads the dimensions and data after the magic word. rest, when
// not -1, is the exact number of bytes left in r.
func readIDXBody(r io.Reader, magic [4]byte, rest int64, limit uint64) (*tensor.Tensor, error) {
	if magic[0] != 0 || magic[1] != 0 {
		return nil, fmt.Errorf("%w: bad magic word % x (want 00 00 <type> <ndim>)", ErrIDX, magic[:])
	}
	typ, ndim := magic[2], int(magic[3])
	esize, dtype := idxType(typ)
	if esize == 0 {
		return nil, fmt.Errorf("%w: unknown element type 0x%02x (want 08, 09, 0b, 0c, 0d or 0e)", ErrIDX, typ)
	}
	if ndim > maxIDXDims {
		return nil, fmt.Errorf("%w: %d dimensions (at most %d supported)", ErrIDX, ndim, maxIDXDims)
	}
	var dimBuf [4 * maxIDXDims]byte
	if n, err := io.ReadFull(r, dimBuf[:4*ndim]); err != nil {
		return nil, readErr("dimensions", n, 4*ndim, err)
	}
	// The product of the non-zero dimensions is checked against the
	// limit whatever their order (a zero dimension does not excuse a huge
	// one after it, nor before it), in bytes of the tensor it decodes to
	// (int8 and int16 widen to int32): what is allocated, and what
	// WriteIDX writes back, so whatever is read can be written and read
	// again.
	shape := make([]int, ndim)
	decoded := uint64(dtype.Size())
	elems := uint64(1)
	zero := false
	for i := range shape {
		d := uint64(binary.BigEndian.Uint32(dimBuf[4*i:]))
		shape[i] = int(d)
		if d == 0 {
			zero = true
			continue
		}
		if elems*decoded > limit/d {
			return nil, fmt.Errorf("%w: dimensions %v exceed the %d-byte limit (as %v)", ErrIDX, readDims(dimBuf[:4*ndim]), limit, dtype)
		}
		elems *= d
	}
	total := elems * uint64(esize)
	if zero {
		total = 0
	}
	if total > math.MaxInt {
		return nil, fmt.Errorf("%w: dimensions %v too large for this platform", ErrIDX, shape)
	}
	want := int(total)
	if rest >= 0 && rest-int64(4*ndim) != int64(want) {
		return nil, fmt.Errorf("%w: dimensions %v of 0x%02x elements need %d bytes of data, the file has %d", ErrIDX, shape, typ, want, rest-int64(4*ndim))
	}
	buf, err := boundedio.ReadGrowing(r, want)
	if err != nil {
		return nil, readErr(fmt.Sprintf("data for dimensions %v", shape), len(buf), want, err)
	}
	return decodeIDX(buf, typ, dtype, shape), nil
}

func readDims(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return out
}

// idxType returns the element size and the tensor dtype of an IDX type.
func idxType(typ byte) (int, tensor.DType) {
	switch typ {
	case idxUint8:
		return 1, tensor.Uint8
	case idxInt8:
		return 1, tensor.Int32
	case idxInt16:
		return 2, tensor.Int32
	case idxInt32:
		return 4, tensor.Int32
	case idxFloat32:
		return 4, tensor.Float32
	case idxFloat64:
		return 8, tensor.Float64
	}
	return 0, tensor.Invalid
}

func readErr(what string, got, want int, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: truncated %s: got %d of %d bytes: %w", ErrIDX, what, got, want, io.ErrUnexpectedEOF)
	}
	var ce flate.CorruptInputError
	if errors.As(err, &ce) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		return fmt.Errorf("%w: reading %s: gzip: %w", ErrIDX, what, err)
	}
	return fmt.Errorf("data: reading IDX %s: %w", what, err)
}

// decodeIDX converts big-endian IDX elements into a tensor.
func decodeIDX(b []byte, typ byte, d tensor.DType, shape []int) *tensor.Tensor {
	if typ == idxUint8 {
		return tensor.FromUint8(b, shape...)
	}
	t := tensor.New(d, shape...)
	switch typ {
	case idxInt8:
		out := t.Int32s()
		for i := range out {
			out[i] = int32(int8(b[i]))
		}
	case idxInt16:
		out := t.Int32s()
		for i := range out {
			out[i] = int32(int16(binary.BigEndian.Uint16(b[2*i:])))
		}
	case idxInt32:
		out := t.Int32s()
		for i := range out {
			out[i] = int32(binary.BigEndian.Uint32(b[4*i:]))
		}
	case idxFloat32:
		out := t.Float32s()
		for i := range out {
			out[i] = math.Float32frombits(binary.BigEndian.Uint32(b[4*i:]))
		}
	case idxFloat64:
		out := t.Float64s()
		for i := range out {
			out[i] = math.Float64frombits(binary.BigEndian.Uint64(b[8*i:]))
		}
	}
	return t
}

// WriteIDX writes t to w as an uncompressed IDX array (wrap w in a
// gzip.Writer for .gz files). Uint8, Int32, Float32 and Float64 tensors are
// supported; other dtypes, more than 255 dimensions or a dimension of 2³²
// or more are errors. t may be non-contiguous.
func WriteIDX(w io.Writer, t *tensor.Tensor) error {
	var typ byte
	switch t.DType() {
	case tensor.Uint8:
		typ = idxUint8
	case tensor.Int32:
		typ = idxInt32
	case tensor.Float32:
		typ = idxFloat32
	case tensor.Float64:
		typ = idxFloat64
	default:
		return fmt.Errorf("data: WriteIDX: IDX has no %v type", t.DType())
	}
	if t.Dim() > 255 {
		return fmt.Errorf("data: WriteIDX: %d dimensions, IDX allows 255", t.Dim())
	}
	hdr := []byte{0, 0, typ, byte(t.Dim())}
	for _, s := range t.Shape() {
		if uint64(s) > math.MaxUint32 {
			return fmt.Errorf("data: WriteIDX: dimension %d does not fit IDX's uint32", s)
		}
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(s))
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("data: WriteIDX: %w", err)
	}
	c := t.Contiguous()
	src := c.Bytes()
	if typ == idxUint8 {
		if _, err := w.Write(src); err != nil {
			return fmt.Errorf("data: WriteIDX: %w", err)
		}
		return nil
	}
	// Swap to big-endian through a bounded buffer.
	es := t.DType().Size()
	buf := make([]byte, 0, min(len(src), 64<<10))
	for len(src) > 0 {
		n := min(len(src), cap(buf))
		buf = buf[:n]
		for i := 0; i < n; i += es {
			switch es {
			case 4:
				binary.BigEndian.PutUint32(buf[i:], binary.NativeEndian.Uint32(src[i:]))
			case 8:
				binary.BigEndian.PutUint64(buf[i:], binary.NativeEndian.Uint64(src[i:]))
			}
		}
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("data: WriteIDX: %w", err)
		}
		src = src[n:]
	}
	return nil
}
