package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/tensor"
)

const refDir = "../testdata/safetensors"

// expected is expected.json, written by make_reference.py.
type expected struct {
	Metadata map[string]string `json:"metadata"`
	Tensors  map[string]struct {
		DType  string        `json:"dtype"`
		Shape  []int         `json:"shape"`
		Values []json.Number `json:"values"`
	} `json:"tensors"`
}

func readExpected(t *testing.T) expected {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(refDir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e
}

// build makes the tensors expected.json describes.
func (e expected) build(t *testing.T) map[string]*tensor.Tensor {
	t.Helper()
	out := map[string]*tensor.Tensor{}
	for name, x := range e.Tensors {
		d, ok := parseDType(x.DType)
		if !ok {
			t.Fatalf("%s: dtype %s", name, x.DType)
		}
		tt := tensor.New(d, x.Shape...)
		for i, v := range x.Values {
			switch d {
			case tensor.Int64:
				n, err := v.Int64()
				if err != nil {
					t.Fatal(err)
				}
				tt.Int64s()[i] = n
			case tensor.Int32, tensor.Uint8: // exact in a float64
				n, err := v.Int64()
				if err != nil {
					t.Fatal(err)
				}
				tt.Reshape(-1).Set(float64(n), i)
			default:
				f, err := v.Float64()
				if err != nil {
					t.Fatal(err)
				}
				tt.Reshape(-1).Set(f, i)
			}
		}
		out[name] = tt
	}
	return out
}

// sameTensor compares dtype, shape and bytes (NaNs equal, -0 != 0).
func sameTensor(a, b *tensor.Tensor) bool {
	return a.DType() == b.DType() && tensor.SameShape(a, b) &&
		bytes.Equal(a.Contiguous().Bytes(), b.Contiguous().Bytes())
}

func sameDict(t *testing.T, got, want map[string]*tensor.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Fatalf("tensor %q missing", name)
		}
		if !sameTensor(g, w) {
			t.Fatalf("tensor %q = %v, want %v", name, g, w)
		}
	}
}

// python_written.safetensors has no checksums, as PyTorch writes it, and
// loads unchecked; python_written_crc.safetensors is the same with godist's
// checksums, computed by make_reference.py.
func TestLoadPythonWritten(t *testing.T) {
	for _, f := range []string{"python_written.safetensors", "python_written_crc.safetensors"} {
		t.Run(f, func(t *testing.T) { testLoadPythonWritten(t, f) })
	}
}

func testLoadPythonWritten(t *testing.T, file string) {
	e := readExpected(t)
	got, meta, err := LoadFile(filepath.Join(refDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(meta, e.Metadata) {
		t.Fatalf("metadata %v, want %v", meta, e.Metadata)
	}
	want := e.build(t)
	sameDict(t, got, want)
	// Spot checks against numbers written in the test, not derived from
	// expected.json: the byte order and the 16-bit formats.
	if v := got["i64"].Int64s(); v[2] != 1<<63-1 || v[3] != -1<<63 {
		t.Fatalf("i64 = %v", v)
	}
	if v := got["bf16"].Values(); v[2] != 3.140625 || v[4] != 65536 {
		t.Fatalf("bf16 = %v", v)
	}
	if v := got["f16"].Values(); v[2] != 65504 {
		t.Fatalf("f16 = %v", v)
	}
	if s := got["scalar"]; s.Dim() != 0 || s.Item() != 42.5 {
		t.Fatalf("scalar = %v", s)
	}
	if s := got["empty"]; !tensor.SameShape(s, tensor.New(tensor.Float32, 0, 3)) {
		t.Fatalf("empty = %v", s)
	}
}

// Save writes exactly the bytes make_reference.py writes for the same
// tensors: header layout, order, padding, checksums and data.
func TestSaveMatchesPythonBytes(t *testing.T) {
	e := readExpected(t)
	var buf bytes.Buffer
	if err := Save(&buf, e.build(t), e.Metadata); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(refDir, "python_written_crc.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("Go wrote\n%q\nPython wrote\n%q", buf.Bytes(), want)
	}
}

// When Python with numpy is here, make_reference.py parses a Go-written file
// by hand and checks its values. Set GODIST_CHECKPOINT_OUT to a file name to
// keep the Go-written file.
func TestPythonReadsGoWritten(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	if err := exec.Command(py, "-c", "import numpy").Run(); err != nil {
		t.Skip("python3 has no numpy")
	}
	e := readExpected(t)
	p := os.Getenv("GODIST_CHECKPOINT_OUT")
	if p == "" {
		p = filepath.Join(t.TempDir(), "go_written.safetensors")
	}
	ts := e.build(t)
	// Write one tensor non-contiguously, to check that path too.
	w := ts["net1.weight"]
	ts["net1.weight"] = w.T().Contiguous().T()
	if ts["net1.weight"].IsContiguous() {
		t.Fatal("test tensor is contiguous")
	}
	if err := SaveFile(p, ts, e.Metadata); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, filepath.Join(refDir, "make_reference.py"), "verify", p).CombinedOutput()
	if err != nil {
		t.Fatalf("python verify: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// onlyReader hides Len and the concrete type, forcing the unknown-length
// path.
type onlyReader struct{ io.Reader }

func TestRoundTrip(t *testing.T) {
	g := tensor.NewRNG(1)
	m := tensor.Randn(g, 3, 4)
	bf := tensor.New(tensor.BFloat16, 2, 2)
	bf.Copy(tensor.FromFloat32([]float32{1, -2, 3.5, 1e-3}, 2, 2))
	ts := map[string]*tensor.Tensor{
		"layer.0.weight":   m,
		"layer.0.weight_t": m.T(), // non-contiguous
		"narrow":           m.Narrow(1, 1, 2),
		"f64":              tensor.FromFloat64([]float64{1, 2}, 2),
		"i64":              tensor.FromInt64([]int64{-1, 1 << 40}, 1, 2),
		"i32":              tensor.FromInt32([]int32{7}, 1),
		"u8":               tensor.FromUint8([]uint8{1, 2, 3}),
		"bf16":             bf,
		"f16":              tensor.New(tensor.Float16, 3).Fill(0.5),
		"scalar":           tensor.Scalar(3),
		"empty":            tensor.New(tensor.Int64, 2, 0),
		"weird \"name\" é": tensor.Scalar(1),
	}
	for _, meta := range []map[string]string{nil, {"epoch": "3", "note": "a \"quoted\" <value>"}} {
		var buf bytes.Buffer
		if err := Save(&buf, ts, meta); err != nil {
			t.Fatal(err)
		}
		raw := buf.Bytes()
		if n := binary.LittleEndian.Uint64(raw); n%8 != 0 {
			t.Fatalf("header length %d not a multiple of 8", n)
		}
		for name, r := range map[string]io.Reader{"known length": bytes.NewReader(raw), "unknown length": onlyReader{bytes.NewReader(raw)}} {
			got, gotMeta, err := Load(r)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			sameDict(t, got, ts)
			if !maps.Equal(gotMeta, meta) || (meta == nil) != (gotMeta == nil) {
				t.Fatalf("%s: metadata %v, want %v", name, gotMeta, meta)
			}
		}
		// Deterministic output.
		var again bytes.Buffer
		Save(&again, ts, meta)
		if !bytes.Equal(raw, again.Bytes()) {
			t.Fatal("two saves of the same dict differ")
		}
	}
	// An empty dict.
	var buf bytes.Buffer
	if err := Save(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	got, meta, err := Load(&buf)
	if err != nil || len(got) != 0 || meta != nil {
		t.Fatalf("empty dict: %v %v %v", got, meta, err)
	}
}

func TestSaveFileLoadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ck.safetensors")
	a := map[string]*tensor.Tensor{"w": tensor.FromFloat32([]float32{1, 2}, 2)}
	if err := SaveFile(p, a, map[string]string{"step": "1"}); err != nil {
		t.Fatal(err)
	}
	b := map[string]*tensor.Tensor{"w": tensor.FromFloat32([]float32{3, 4, 5}, 3)}
	if err := SaveFile(p, b, nil); err != nil { // overwrite
		t.Fatal(err)
	}
	got, meta, err := LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sameDict(t, got, b)
	if meta != nil {
		t.Fatalf("metadata %v", meta)
	}
	// A failed save leaves the old file and no temporary behind.
	if err := SaveFile(p, map[string]*tensor.Tensor{"bad": nil}, nil); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("SaveFile of a nil tensor: %v", err)
	}
	got, _, err = LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sameDict(t, got, b)
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(ents))
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode())
	}
	if _, _, err := LoadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if err := SaveFile(filepath.Join(dir, "no", "such", "dir", "x"), a, nil); err == nil {
		t.Fatal("SaveFile into a missing directory succeeded")
	}
	// A path without a file name says so, and writes nothing.
	t.Chdir(dir)
	for _, p := range []string{"", "sub/"} {
		if err := SaveFile(p, a, nil); err == nil || !strings.Contains(err.Error(), "names no file") {
			t.Fatalf("SaveFile(%q): %v, want an error saying it names no file", p, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries after SaveFile without a name, want 1", len(ents))
	}
}

func TestSaveErrors(t *testing.T) {
	for name, ts := range map[string]map[string]*tensor.Tensor{
		"nil":      {"a": nil},
		"unsized":  {"a": new(tensor.Tensor)},
		"reserved": {"__metadata__": tensor.Scalar(1)},
	} {
		var buf bytes.Buffer
		if err := Save(&buf, ts, nil); err == nil || !strings.HasPrefix(err.Error(), "checkpoint: ") {
			t.Fatalf("%s: %v", name, err)
		}
		if buf.Len() != 0 {
			t.Fatalf("%s: wrote %d bytes before failing", name, buf.Len())
		}
	}
	boom := errors.New("disk full")
	err := Save(failWriter{boom}, map[string]*tensor.Tensor{"a": tensor.Scalar(1)}, nil)
	if !errors.Is(err, boom) {
		t.Fatalf("writer error: %v", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// file builds a safetensors stream from a header string and data.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestLoadErrors(t *testing.T) {
	f32 := func(off string) string { return `{"a":{"dtype":"F32","shape":[2],"data_offsets":` + off + `}}` }
	for _, c := range []struct {
		name, want, tensor string
		in                 []byte
		eof                bool
	}{
		{"empty", "truncated header length", "", nil, true},
		{"short length", "truncated header length", "", []byte{1, 0, 0}, true},
		{"huge header", "exceeds", "", binary.LittleEndian.AppendUint64(nil, 1<<40), false},
		{"header past end", "only 1 bytes follow", "", file("{}", nil)[:9], true},
		{"not an object", "does not start with '{'", "", file("[]", nil), false},
		{"bad json", "header entry: invalid character", "a", file(`{"a":}`, nil), false},
		{"bad key", "header JSON", "", file(`{1:2}`, nil), false},
		{"unclosed", "header JSON", "", file(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}`, make([]byte, 4)), false},
		{"trailing json", "trailing data after the header", "", file(`{} x`, nil), false},
		{"unknown dtype", `dtype "Q8" is not supported`, "a", file(`{"a":{"dtype":"Q8","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), false},
		{"missing field", "lacks", "a", file(`{"a":{"dtype":"F32","shape":[2]}}`, make([]byte, 8)), false},
		{"field case", "lacks", "a", file(`{"a":{"Dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), false},
		{"bad field", "header entry", "a", file(`{"a":{"dtype":2,"shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), false},
		{"negative dim", "header entry", "a", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, make([]byte, 8)), false},
		{"float dim", "header entry", "a", file(`{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, make([]byte, 8)), false},
		{"size mismatch", "hold 4 bytes, but F32[2] needs 8", "a", file(f32("[0,4]"), make([]byte, 4)), false},
		{"reversed", "end before they begin", "a", file(f32("[8,0]"), make([]byte, 8)), false},
		{"three offsets", "is not [begin, end]", "a", file(f32("[0,8,9]"), make([]byte, 8)), false},
		{"gap", "leave a gap", "a", file(f32("[4,12]"), make([]byte, 12)), false},
		{"overlap", "overlap", "b", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, make([]byte, 8)), false},
		{"duplicate", "appears twice", "a", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), false},
		{"bad metadata", "__metadata__", "", file(`{"__metadata__":{"k":1}}`, nil), false},
		{"short data", "cover 8 bytes of data, the file holds 7", "", file(f32("[0,8]"), make([]byte, 7)), false},
		{"long data", "cover 8 bytes of data, the file holds 9", "", file(f32("[0,8]"), make([]byte, 9)), false},
		{"huge shape", "too large", "a", file(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, nil), false},
		{"huge zero shape", "too large", "a", file(`{"a":{"dtype":"F64","shape":[0,9999999999999],"data_offsets":[0,0]}}`, nil), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Load(bytes.NewReader(c.in))
			check := func(err error) {
				t.Helper()
				var fe *FormatError
				if !errors.As(err, &fe) || !errors.Is(err, ErrFormat) {
					t.Fatalf("error %v (%T), want a *FormatError", err, err)
				}
				if !strings.Contains(err.Error(), c.want) || fe.Tensor != c.tensor {
					t.Fatalf("error %q (tensor %q), want one containing %q about tensor %q", err, fe.Tensor, c.want, c.tensor)
				}
				if errors.Is(err, io.ErrUnexpectedEOF) != c.eof {
					t.Fatalf("error %q: wraps io.ErrUnexpectedEOF = %v", err, !c.eof)
				}
			}
			check(err)
			// The unknown-length path must fail too (perhaps differently).
			_, _, err = Load(onlyReader{bytes.NewReader(c.in)})
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("unknown length: %v", err)
			}
		})
	}
	// The unknown-length path's own checks: truncated and trailing data.
	for in, want := range map[string]string{
		string(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 7))): "truncated data",
		string(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 9))): "data continues",
	} {
		_, _, err := Load(onlyReader{strings.NewReader(in)})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want %q", err, want)
		}
	}
}

// Headers that claim far more than the input holds must not allocate it.
func TestLoadHugeClaimsAllocateLittle(t *testing.T) {
	claims := [][]byte{
		binary.LittleEndian.AppendUint64(nil, MaxHeaderSize), // 100 MB header, no bytes
		file(`{"a":{"dtype":"U8","shape":[4000000000],"data_offsets":[0,4000000000]}}`, []byte{1, 2, 3}),
	}
	for _, in := range claims {
		for _, r := range []io.Reader{bytes.NewReader(in), onlyReader{bytes.NewReader(in)}} {
			before := totalAlloc()
			if _, _, err := Load(r); !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v", err)
			}
			if d := totalAlloc() - before; d > 8<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte input", d, len(in))
			}
		}
	}
}

func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join(refDir, "python_written.safetensors")); err == nil {
		f.Add(b)
	}
	var buf bytes.Buffer
	Save(&buf, map[string]*tensor.Tensor{
		"a": tensor.FromFloat32([]float32{1, 2}, 2),
		"b": tensor.New(tensor.BFloat16, 0),
		"c": tensor.FromUint8([]uint8{9}),
	}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Add(file(`{}`, nil))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 7)))
	f.Fuzz(func(t *testing.T, in []byte) {
		ts, meta, err := Load(bytes.NewReader(in))
		ts2, _, err2 := Load(onlyReader{bytes.NewReader(in)})
		if (err == nil) != (err2 == nil) {
			t.Fatalf("known length: %v; unknown length: %v", err, err2)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoint: ") || !strings.HasPrefix(err2.Error(), "checkpoint: ") {
				t.Fatalf("errors without the package prefix: %v / %v", err, err2)
			}
			return
		}
		sameDict(t, ts2, ts)
		// What loads saves and loads back the same.
		var out bytes.Buffer
		if err := Save(&out, ts, meta); err != nil {
			t.Fatal(err)
		}
		back, meta2, err := Load(&out)
		if err != nil {
			t.Fatal(err)
		}
		sameDict(t, back, ts)
		if !maps.Equal(meta, meta2) {
			t.Fatalf("metadata %v then %v", meta, meta2)
		}
	})
}
