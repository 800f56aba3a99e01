package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/godist/godist/tensor"
)

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func idxBytes(t *testing.T, x *tensor.Tensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteIDX(&buf, x); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestIDXRoundTrip(t *testing.T) {
	for _, x := range []*tensor.Tensor{
		tensor.FromUint8([]uint8{0, 1, 128, 255, 7, 9}, 2, 3),
		tensor.FromInt32([]int32{-1, 2, math.MaxInt32, math.MinInt32}, 4),
		tensor.FromFloat32([]float32{1.5, -0, float32(math.Inf(1)), 3e-39}, 2, 1, 2),
		tensor.FromFloat64([]float64{math.Pi, -1e300}, 2),
		tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3).T(), // non-contiguous
		tensor.New(tensor.Uint8, 0, 28, 28),
	} {
		raw := idxBytes(t, x)
		for name, in := range map[string][]byte{"raw": raw, "gzip": gz(raw)} {
			got, err := ReadIDX(bytes.NewReader(in))
			if err != nil {
				t.Fatalf("%v %s: %v", x, name, err)
			}
			if !tensor.Equal(got, x) {
				t.Fatalf("%s: read %v, wrote %v", name, got, x)
			}
		}
	}
	if err := WriteIDX(io.Discard, tensor.New(tensor.Int64, 2)); err == nil {
		t.Fatal("WriteIDX of int64 succeeded")
	}
}

func TestIDXBigEndianAndNarrowTypes(t *testing.T) {
	// Hand-written headers: int8 and int16 widen to int32.
	in := []byte{0, 0, 0x09, 1, 0, 0, 0, 3, 0xff, 0x7f, 0x80}
	got, err := ReadIDX(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := tensor.FromInt32([]int32{-1, 127, -128}, 3); !tensor.Equal(got, want) {
		t.Fatalf("int8: %v, want %v", got, want)
	}
	in = []byte{0, 0, 0x0B, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0xff, 0xfe, 0x01, 0x00}
	got, err = ReadIDX(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := tensor.FromInt32([]int32{-2, 256}, 1, 2); !tensor.Equal(got, want) {
		t.Fatalf("int16: %v, want %v", got, want)
	}
	in = []byte{0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3f, 0xc0, 0, 0} // 1.5f
	got, err = ReadIDX(bytes.NewReader(in))
	if err != nil || got.Float32s()[0] != 1.5 {
		t.Fatalf("float32: %v, %v", got, err)
	}
}

func TestIDXErrors(t *testing.T) {
	valid := idxBytes(t, tensor.FromUint8([]uint8{1, 2, 3, 4}, 2, 2))
	trailing := gz(append(clone(valid), 9))
	corrupt := gz(valid)
	corrupt[len(corrupt)-6] ^= 0xff // the CRC-32 in the gzip trailer
	for _, c := range []struct {
		name, want string
		in         []byte
		eof        bool
	}{
		{"empty", "empty stream", nil, false},
		{"short magic", "truncated magic", []byte{0, 0}, true},
		{"bad magic", "bad magic", []byte{1, 2, 8, 1, 0, 0, 0, 0}, false},
		{"bad type", "unknown element type 0x07", []byte{0, 0, 7, 1, 0, 0, 0, 0}, false},
		{"many dims", "200 dimensions", []byte{0, 0, 8, 200}, false},
		{"short dims", "truncated dimensions", []byte{0, 0, 8, 2, 0, 0, 0, 1, 0}, true},
		{"short data", "truncated data", valid[:len(valid)-1], true},
		{"short gzip data", "truncated", gz(valid[:len(valid)-1]), true},
		{"absurd dims", "exceed", []byte{0, 0, 0x0E, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2}, false},
		{"trailing gzip", "trailing data", trailing, false},
		{"gzip checksum", "gzip", corrupt, false},
		{"short gzip", "gzip", []byte{0x1f, 0x8b, 8, 0}, true},
		{"bad gzip", "gzip: invalid header", []byte{0x1f, 0x8b, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadIDX(bytes.NewReader(c.in))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrIDX) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "data: ") {
				t.Fatalf("error %q, want one wrapping ErrIDX containing %q", err, c.want)
			}
			if c.eof != errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %q: wraps io.ErrUnexpectedEOF = %v, want %v", err, !c.eof, c.eof)
			}
		})
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// A header that claims a gigabyte in front of a few bytes must not cost a
// gigabyte.
func TestIDXHugeClaimAllocatesLittle(t *testing.T) {
	in := []byte{0, 0, 0x08, 1, 0x40, 0, 0, 0, 1, 2, 3} // 1 GiB of uint8
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadIDX(bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 8<<20 {
		t.Fatalf("allocated %d bytes for an 11-byte input", d)
	}
}

func TestReadIDXFile(t *testing.T) {
	dir := t.TempDir()
	x := tensor.FromFloat32([]float32{1, 2, 3}, 3)
	raw := idxBytes(t, x)
	p := filepath.Join(dir, "x.idx")
	os.WriteFile(p, raw, 0o644)
	got, err := ReadIDXFile(p)
	if err != nil || !tensor.Equal(got, x) {
		t.Fatalf("ReadIDXFile = %v, %v", got, err)
	}
	// A file longer than its header says.
	os.WriteFile(p, append(clone(raw), 0), 0o644)
	if _, err := ReadIDXFile(p); !errors.Is(err, ErrIDX) || !strings.Contains(err.Error(), p) {
		t.Fatalf("long file: %v", err)
	}
	// A header claiming more than the file holds is caught from the size.
	os.WriteFile(p, []byte{0, 0, 0x08, 1, 0x7f, 0, 0, 0, 1}, 0o644)
	if _, err := ReadIDXFile(p); !errors.Is(err, ErrIDX) || !strings.Contains(err.Error(), "the file has 1") {
		t.Fatalf("short file: %v", err)
	}
	if _, err := ReadIDXFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzReadIDX(f *testing.F) {
	add := func(x *tensor.Tensor) {
		var buf bytes.Buffer
		WriteIDX(&buf, x)
		f.Add(buf.Bytes())
		f.Add(gz(buf.Bytes()))
	}
	add(tensor.FromUint8([]uint8{1, 2, 3, 4}, 2, 2))
	add(tensor.FromInt32([]int32{-5, 6}, 2))
	add(tensor.FromFloat32([]float32{1.5}, 1))
	add(tensor.FromFloat64([]float64{2.5, 3}, 1, 2))
	f.Add([]byte{0, 0, 0x09, 1, 0, 0, 0, 3, 0xff, 0x7f, 0x80})
	f.Add([]byte{0, 0, 0x0B, 0, 1, 2})
	f.Add([]byte{0, 0, 0x08, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		x, err := ReadIDX(bytes.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "data: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		// Whatever was read writes back and reads back the same.
		var buf bytes.Buffer
		if err := WriteIDX(&buf, x); err != nil {
			t.Fatalf("WriteIDX of %v: %v", x, err)
		}
		y, err := ReadIDX(&buf)
		if err != nil || !sameBits(x, y) {
			t.Fatalf("round trip: %v -> %v, %v", x, y, err)
		}
	})
}

// sameBits compares dtype, shape and raw bytes (so NaNs compare equal).
func sameBits(a, b *tensor.Tensor) bool {
	return a.DType() == b.DType() && tensor.SameShape(a, b) && bytes.Equal(a.Bytes(), b.Bytes())
}

// TestIDXDimensionOrder: the size limit does not depend on where a zero
// dimension is (issue 19, item 13: [0, 2^31] was accepted and [2^31, 0]
// refused).
func TestIDXDimensionOrder(t *testing.T) {
	hdr := func(dims ...uint32) []byte {
		b := []byte{0, 0, idxFloat32, byte(len(dims))}
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, d)
		}
		return b
	}
	for _, dims := range [][]uint32{{0, 1 << 29}, {1 << 29, 0}} {
		if _, err := ReadIDX(bytes.NewReader(hdr(dims...))); err != nil {
			t.Errorf("%v (no elements): %v", dims, err)
		}
	}
	for _, dims := range [][]uint32{{0, 1 << 31}, {1 << 31, 0}, {1 << 31, 0, 1 << 31}} {
		if _, err := ReadIDX(bytes.NewReader(hdr(dims...))); !errors.Is(err, ErrIDX) {
			t.Errorf("%v: %v, want the size limit", dims, err)
		}
	}
}

// TestIDXGzipBombRefused (issue 19, item 13): a 1 KB gzip file whose
// header declares 300 MB of data is refused by a limited read before
// anything is inflated or allocated (ReadIDXFile would inflate up to the
// 4 GiB limit); the Fashion-MNIST loader reads with such a limit.
func TestIDXGzipBombRefused(t *testing.T) {
	var raw bytes.Buffer
	raw.Write([]byte{0, 0, 0x08, 3})
	for _, d := range []uint32{300000, 1000, 1000} {
		raw.Write(binary.BigEndian.AppendUint32(nil, d))
	}
	raw.Write(make([]byte, 1<<20)) // the first MiB of the zeros
	path := filepath.Join(t.TempDir(), "train-images-idx3-ubyte.gz")
	if err := os.WriteFile(path, gz(raw.Bytes()), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadIDXFileLimited(path, 100<<20)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrIDX) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a 300 MB claim under a 100 MB limit: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("refusing it allocated %d bytes", grew)
	}
	// The loader refuses it too, naming the file.
	os.WriteFile(filepath.Join(filepath.Dir(path), "train-labels-idx1-ubyte.gz"), gz([]byte{0, 0, 8, 1, 0, 0, 0, 0}), 0o644)
	if _, _, err := LoadFashionMNIST(filepath.Dir(path), true); !errors.Is(err, ErrIDX) || !strings.Contains(err.Error(), "train-images") {
		t.Fatalf("LoadFashionMNIST of the bomb: %v", err)
	}
}
