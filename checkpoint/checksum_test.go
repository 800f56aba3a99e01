package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godist/godist/tensor"
)

// checksummed returns a state dict of every dtype, its metadata, and the
// file Save writes for them.
func checksummed(t *testing.T) (map[string]*tensor.Tensor, map[string]string, []byte) {
	t.Helper()
	g := tensor.NewRNG(7)
	ts := map[string]*tensor.Tensor{
		"fc.weight": tensor.Randn(g, 3, 4),
		"fc.bias":   tensor.Randn(g, 3),
		"f64":       tensor.FromFloat64([]float64{1, -2}, 2),
		"i64":       tensor.FromInt64([]int64{5, 1 << 40}, 2),
		"i32":       tensor.FromInt32([]int32{-7}, 1),
		"u8":        tensor.FromUint8([]uint8{1, 2, 3}),
		"bf16":      tensor.New(tensor.BFloat16, 2).Fill(1.5),
		"f16":       tensor.New(tensor.Float16, 3).Fill(0.5),
		"empty":     tensor.New(tensor.Float32, 0, 3),
		"scalar":    tensor.Scalar(2),
	}
	meta := map[string]string{"step": "10", "epoch": "3", "note": "a \"quoted\" value"}
	var buf bytes.Buffer
	if err := Save(&buf, ts, meta); err != nil {
		t.Fatal(err)
	}
	return ts, meta, buf.Bytes()
}

// headerMeta returns the "__metadata__" of a file as JSON values, checking
// that it is an object of strings, as the format requires.
func headerMeta(t *testing.T, file []byte) map[string]string {
	t.Helper()
	n := binary.LittleEndian.Uint64(file)
	var h map[string]json.RawMessage
	if err := json.Unmarshal(file[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(h[metadataKey], &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("metadata %q = %v (%T), not a string", k, v, v)
		}
		out[k] = s
	}
	return out
}

// The checksums are strings in the metadata, and Load hands back the
// caller's metadata without them.
func TestChecksumsInMetadata(t *testing.T) {
	ts, meta, raw := checksummed(t)
	hm := headerMeta(t, raw)
	if len(hm) != len(meta)+len(ts)+1 {
		t.Fatalf("header metadata %v: want the %d given entries and %d checksums", hm, len(meta), len(ts)+1)
	}
	for name := range ts {
		if _, ok := parseCRC(hm[checksumPrefix+name]); !ok {
			t.Fatalf("tensor %q: checksum %q", name, hm[checksumPrefix+name])
		}
	}
	if _, ok := parseCRC(hm[checksumKey]); !ok {
		t.Fatalf("header checksum %q", hm[checksumKey])
	}
	got, gotMeta, err := Load(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	sameDict(t, got, ts)
	if !maps.Equal(gotMeta, meta) {
		t.Fatalf("metadata %v, want %v", gotMeta, meta)
	}

	// Stale checksums in the metadata given to Save (a loaded file's
	// metadata, copied) are replaced, not kept.
	stale := maps.Clone(hm)
	ts["fc.bias"] = tensor.New(tensor.Float32, 3).Fill(9)
	var buf bytes.Buffer
	if err := Save(&buf, ts, stale); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err = Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	sameDict(t, got, ts)
	if !maps.Equal(gotMeta, meta) {
		t.Fatalf("metadata %v, want %v", gotMeta, meta)
	}
}

// Flipping any single bit of a file Save wrote, in the data, the
// checksums, the caller's metadata or anywhere else in the header, gives an
// error wrapping ErrFormat; one in a tensor's data is a checksum mismatch
// naming the tensor, and LoadFile's error names the file.
func TestBitFlipsAreCaught(t *testing.T) {
	_, _, raw := checksummed(t)
	hlen := int(binary.LittleEndian.Uint64(raw))
	data := 8 + hlen
	// Where each tensor's data lies, and the header's metadata values.
	entries, _, _, err := decodeHeader(raw[8:data], int64(len(raw)-data))
	if err != nil {
		t.Fatal(err)
	}
	owner := func(at int) string {
		for _, e := range entries {
			if uint64(at-data) >= e.begin && uint64(at-data) < e.end {
				return e.name
			}
		}
		t.Fatalf("byte %d is in no tensor", at)
		return ""
	}
	header := string(raw[8:data])
	inValue := make([]bool, len(raw))
	for k, v := range headerMeta(t, raw) {
		q, _ := json.Marshal(v)
		kq, _ := json.Marshal(k)
		i := strings.Index(header, string(kq)+":"+string(q))
		if i < 0 {
			t.Fatalf("metadata %s=%s not found in the header", kq, q)
		}
		for j := range len(q) - 2 { // the value's characters, not its quotes
			inValue[8+i+len(kq)+2+j] = true
		}
	}

	flipped := make([]byte, len(raw))
	for bit := range 8 * len(raw) {
		copy(flipped, raw)
		at := bit / 8
		flipped[at] ^= 1 << (bit % 8)
		for _, r := range []io.Reader{bytes.NewReader(flipped), onlyReader{bytes.NewReader(flipped)}} {
			_, _, err := Load(r)
			if err == nil {
				where := "the header"
				switch {
				case at >= data:
					where = "tensor " + owner(at) + "'s data"
				case inValue[at]:
					where = "a metadata value"
				}
				t.Fatalf("flipping bit %d of byte %d (%q, in %s) loaded without error", bit%8, at, raw[at], where)
			}
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("flipping bit %d of byte %d: %v", bit%8, at, err)
			}
			if at >= data {
				var fe *FormatError
				if !errors.Is(err, ErrCorrupt) || !errors.As(err, &fe) || !strings.Contains(err.Error(), "the file is corrupt") {
					t.Fatalf("flipping bit %d of byte %d: %v, want a checksum mismatch", bit%8, at, err)
				}
				if fe.Tensor != owner(at) {
					t.Fatalf("flipping bit %d of byte %d: %v names tensor %q, want %q", bit%8, at, err, fe.Tensor, owner(at))
				}
			}
		}
	}

	// LoadFile's error names the tensor and the file and says it is corrupt.
	p := filepath.Join(t.TempDir(), "ck.safetensors")
	copy(flipped, raw)
	flipped[len(flipped)-1] ^= 0x10
	if err := os.WriteFile(p, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = LoadFile(p)
	last := entries[len(entries)-1].name
	for _, want := range []string{p, "corrupt", `tensor "` + last + `"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("LoadFile: %v, want an error containing %q", err, want)
		}
	}
	t.Log(err)
}

// A file with some checksums must have them all.
func TestPartialChecksums(t *testing.T) {
	data := make([]byte, 8)
	a := `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	var buf bytes.Buffer
	if err := Save(&buf, map[string]*tensor.Tensor{"a": tensor.New(tensor.Float32, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	hm := headerMeta(t, buf.Bytes())
	sum := `"godist.crc32c.a":"` + hm["godist.crc32c.a"] + `"`
	head := `"godist.crc32c":"` + hm["godist.crc32c"] + `"`
	for name, c := range map[string]struct{ header, want string }{
		"all":             {`{"__metadata__":{` + head + `,` + sum + `},` + a + `}`, ""},
		"none":            {`{` + a + `}`, ""},
		"no tensor sum":   {`{"__metadata__":{` + head + `},` + a + `}`, `tensor "a": the file is corrupt: it has no checksum`},
		"no header sum":   {`{"__metadata__":{` + sum + `},` + a + `}`, "but not the header's"},
		"orphan":          {`{"__metadata__":{` + head + `,` + sum + `,"godist.crc32c.b":"00000000"},` + a + `}`, `checksums "godist.crc32c.b" of tensors the file lacks`},
		"upper case":      {`{"__metadata__":{` + head + `,` + strings.ToUpper(sum) + `},` + a + `}`, "no checksum"},
		"upper case hex":  {`{"__metadata__":{"godist.crc32c":"` + strings.ToUpper(hm["godist.crc32c"]) + `",` + sum + `},` + a + `}`, "not 8 lowercase hex digits"},
		"short sum":       {`{"__metadata__":{` + head + `,"godist.crc32c.a":"0"},` + a + `}`, "not 8 lowercase hex digits"},
		"extra user meta": {`{"__metadata__":{` + head + `,` + sum + `,"x":"y"},` + a + `}`, "the header (metadata, tensor names, dtypes and shapes) has CRC-32C"},
	} {
		for len(c.header)%8 != 0 {
			c.header += " "
		}
		_, meta, err := Load(bytes.NewReader(file(c.header, data)))
		if c.want == "" {
			if err != nil || meta != nil {
				t.Fatalf("%s: %v, metadata %v", name, err, meta)
			}
			continue
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want a corruption error containing %q", name, err, c.want)
		}
	}
}
