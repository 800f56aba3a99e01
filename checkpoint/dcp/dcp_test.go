package dcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/dist/disttest"
	"github.com/godist/godist/internal/crc32c"
	"github.com/godist/godist/tensor"
)

// globals are the whole tensors of the test model.
type globals map[string]*tensor.Tensor

func randTensor(rng *rand.Rand, d tensor.DType, shape ...int) *tensor.Tensor {
	t := tensor.New(d, shape...)
	b := t.Bytes()
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return t
}

func model(seed uint64) globals {
	rng := rand.New(rand.NewPCG(seed, 7))
	return globals{
		"a":   randTensor(rng, tensor.Float32, 5, 7),
		"b":   randTensor(rng, tensor.Float64, 13),
		"c":   randTensor(rng, tensor.Int64, 3, 4, 2),
		"h":   randTensor(rng, tensor.BFloat16, 9),
		"s":   randTensor(rng, tensor.Float32),
		"z":   randTensor(rng, tensor.Float32, 0, 3),
		"rep": randTensor(rng, tensor.Float32, 4, 3),
	}
}

// flatPiece is elements [lo, hi) of t's flattening, as a new tensor.
func flatPiece(t *tensor.Tensor, lo, hi int) Shard {
	sz := t.DType().Size()
	return Flat(t.Shape(), lo, tensor.FromBytes(t.DType(), bytes.Clone(t.Bytes()[lo*sz:hi*sz]), hi-lo))
}

// fsdpShard is rank's contiguous part of t's flattening when world ranks
// split it in chunks of ceil(n/world) (the last shorter or empty).
func fsdpShard(t *tensor.Tensor, rank, world int) Shard {
	n := t.Numel()
	chunk := (n + world - 1) / world
	return flatPiece(t, min(n, rank*chunk), min(n, (rank+1)*chunk))
}

// rectPiece copies the box at offsets of the given lengths out of t,
// element by element.
func rectPiece(t *tensor.Tensor, offsets, lengths []int) Shard {
	sz := t.DType().Size()
	out := tensor.New(t.DType(), lengths...)
	src, dst := t.Bytes(), out.Bytes()
	shape := t.Shape()
	idx := make([]int, len(shape))
	local := 0
	for g := range t.Numel() {
		rem, inside := g, true
		for i := len(shape) - 1; i >= 0; i-- {
			idx[i] = rem % shape[i]
			rem /= shape[i]
		}
		for i := range shape {
			if idx[i] < offsets[i] || idx[i] >= offsets[i]+lengths[i] {
				inside = false
			}
		}
		if inside {
			copy(dst[local*sz:(local+1)*sz], src[g*sz:(g+1)*sz])
			local++
		}
	}
	return Shard{Global: shape, Offset: offsets, Local: out}
}

// empty returns a state like want with zeroed local tensors.
func empty(want State) State {
	out := State{}
	for n, s := range want {
		out[n] = Shard{Global: s.Global, Offset: s.Offset, Local: tensor.New(s.Local.DType(), s.Local.Shape()...)}
	}
	return out
}

func sameState(got, want State) error {
	for n, w := range want {
		if !bytes.Equal(got[n].Local.Bytes(), w.Local.Bytes()) {
			return fmt.Errorf("tensor %q: got %v, want %v", n, got[n].Local, w.Local)
		}
	}
	return nil
}

// fsdpState is rank's state at world ranks: flat shards of everything
// but "rep", which every rank holds whole.
func fsdpState(m globals, rank, world int) State {
	st := State{}
	for n, t := range m {
		if n == "rep" {
			st[n] = Whole(t.Clone())
		} else {
			st[n] = fsdpShard(t, rank, world)
		}
	}
	return st
}

// otherState is rank's state at world 2 with another sharding: columns of
// "a", a split of "c"'s second dimension, uneven flat halves, replicas.
func otherState(m globals, rank int) State {
	st := State{}
	if rank == 0 {
		st["a"] = rectPiece(m["a"], []int{0, 0}, []int{5, 3})
		st["c"] = rectPiece(m["c"], []int{0, 0, 0}, []int{3, 2, 2})
		st["b"] = flatPiece(m["b"], 0, 5)
		st["rep"] = flatPiece(m["rep"], 0, 6)
		st["s"] = Whole(m["s"].Clone())
	} else {
		st["a"] = rectPiece(m["a"], []int{0, 3}, []int{5, 4})
		st["c"] = rectPiece(m["c"], []int{0, 2, 0}, []int{3, 2, 2})
		st["b"] = flatPiece(m["b"], 5, 13)
		st["rep"] = flatPiece(m["rep"], 6, 12)
	}
	st["h"] = Whole(m["h"].Clone())
	st["z"] = Whole(m["z"].Clone())
	return st
}

func wholeState(m globals) State {
	st := State{}
	for n, t := range m {
		st[n] = Whole(t.Clone())
	}
	return st
}

func shardFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

func TestReshard(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := model(1)
	disttest.Spawn(t, 4, func(g *dist.Group) error {
		return Save(ctx, dir, fsdpState(m, g.Rank(), 4), g)
	})
	// One file per rank ("rep" on rank 0 only) and the metadata.
	if files := shardFiles(t, dir); len(files) != 5 || files[0] != MetadataFile {
		t.Fatalf("files %v", files)
	}
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p := meta.Entries["rep"].Pieces; len(p) != 1 || p[0].File != shardFile(0, meta.SaveID) {
		t.Fatalf("replicated tensor saved as %+v, want once by rank 0", p)
	}
	if p := meta.Entries["h"].Pieces; len(p) != 3 {
		t.Fatalf("h saved as %+v, want 3 pieces (rank 3's is empty)", p)
	}

	disttest.Spawn(t, 2, func(g *dist.Group) error {
		want := otherState(m, g.Rank())
		got := empty(want)
		if err := Load(ctx, dir, got, g); err != nil {
			return err
		}
		return sameState(got, want)
	})
	want := wholeState(m)
	got := empty(want)
	if err := Load(ctx, dir, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := sameState(got, want); err != nil {
		t.Fatal(err)
	}

	// And back: saved at world 2 in the other sharding, loaded at world 3
	// as flat shards.
	dir2 := t.TempDir()
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		return Save(ctx, dir2, otherState(m, g.Rank()), g)
	})
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		want := fsdpState(m, g.Rank(), 3)
		got := empty(want)
		if err := Load(ctx, dir2, got, g); err != nil {
			return err
		}
		return sameState(got, want)
	})
}

func TestSaveWorld1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := model(2)
	if err := Save(ctx, dir, wholeState(m), nil); err != nil {
		t.Fatal(err)
	}
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		want := fsdpState(m, g.Rank(), 3)
		got := empty(want)
		if err := Load(ctx, dir, got, g); err != nil {
			return err
		}
		return sameState(got, want)
	})
}

func TestInterruptedSaveKeepsPrevious(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old, next := model(3), model(4)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		return Save(ctx, dir, fsdpState(old, g.Rank(), 2), g)
	})
	before := shardFiles(t, dir)

	testHookBeforeCommit = func() error { return errors.New("killed before commit") }
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		err := Save(ctx, dir, fsdpState(next, g.Rank(), 2), g)
		if err == nil || !strings.Contains(err.Error(), "killed before commit") {
			return fmt.Errorf("interrupted save: %v", err)
		}
		return nil
	})
	testHookBeforeCommit = nil
	if after := shardFiles(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("files after the failed save %v, before %v", after, before)
	}
	// Leftovers of a save killed harder (its shard files still there).
	stray := filepath.Join(dir, shardFile(1, "deadbeef"))
	if err := os.WriteFile(stray, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := wholeState(old)
	got := empty(want)
	if err := Load(ctx, dir, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := sameState(got, want); err != nil {
		t.Fatal(err)
	}

	// The next save that commits replaces it and removes the old files.
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		return Save(ctx, dir, fsdpState(next, g.Rank(), 2), g)
	})
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{MetadataFile, shardFile(0, meta.SaveID), shardFile(1, meta.SaveID)}
	if files := shardFiles(t, dir); fmt.Sprint(files) != fmt.Sprint(wantFiles) {
		t.Fatalf("files %v, want %v", files, wantFiles)
	}
	want = wholeState(next)
	got = empty(want)
	if err := Load(ctx, dir, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := sameState(got, want); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidStateFailsEveryRank(t *testing.T) {
	dir := t.TempDir()
	disttest.Spawn(t, 3, func(g *dist.Group) error {
		st := State{"w": Whole(tensor.New(tensor.Float32, 4))}
		if g.Rank() == 1 {
			st["w"] = Shard{Global: []int{4}, Offset: []int{3}, Local: tensor.New(tensor.Float32, 2)}
		}
		err := Save(context.Background(), dir, st, g)
		if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "rank 1") {
			return fmt.Errorf("got %v, want ErrInvalidState naming rank 1", err)
		}
		return nil
	})
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		st := State{"w": Whole(tensor.New(tensor.Float32, 4))}
		if g.Rank() == 1 {
			st["w"] = Whole(tensor.New(tensor.Float32, 5))
		}
		err := Save(context.Background(), dir, st, g)
		if !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "[4]") || !strings.Contains(err.Error(), "[5]") {
			return fmt.Errorf("got %v, want ErrInvalidState naming both shapes", err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, MetadataFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("metadata after failed saves: %v", err)
	}
}

func saveWhole(t *testing.T, m globals) string {
	t.Helper()
	dir := t.TempDir()
	if err := Save(context.Background(), dir, wholeState(m), nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCorruptShard(t *testing.T) {
	m := model(5)
	dir := saveWhole(t, m)
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, shardFile(0, meta.SaveID))
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := State{"a": Whole(tensor.New(tensor.Float32, 5, 7))}

	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
		text   string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b }, "CRC-32C"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-4] }, "bytes, the metadata says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(file, tc.mutate(bytes.Clone(b)), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Load(context.Background(), dir, want, nil)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want ErrCorrupt naming %s, tensor \"a\" and %q", err, file, tc.text)
			}
			t.Log(err)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		os.Remove(file)
		err := Load(context.Background(), dir, want, nil)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) {
			t.Fatalf("got %v", err)
		}
	})
}

// A file whose checksum matches but whose contents disagree with the
// metadata (a forged or buggy record) is caught by the decoder's checks.
func TestShardDisagreesWithMetadata(t *testing.T) {
	dir := saveWhole(t, model(6))
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := meta.Entries["a"]
	e.Pieces[0].Lengths = []int{7, 5}
	meta.Entries["a"] = e
	if err := writeMetadata(dir, meta); err != nil {
		t.Fatal(err)
	}
	err = Load(context.Background(), dir, State{"a": Whole(tensor.New(tensor.Float32, 5, 7))}, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `tensor "a"`) {
		t.Fatalf("got %v", err)
	}
}

func TestMismatch(t *testing.T) {
	m := model(7)
	dir := saveWhole(t, m)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		state State
		texts []string
	}{
		{"shape", State{"a": Whole(tensor.New(tensor.Float32, 7, 5))}, []string{`"a"`, "[5 7]", "[7 5]"}},
		{"dtype", State{"a": Whole(tensor.New(tensor.Float64, 5, 7))}, []string{`"a"`, "float32", "float64"}},
		{"missing", State{"nope": Whole(tensor.New(tensor.Float32, 2))}, []string{`"nope"`, "not in the checkpoint"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Load(ctx, dir, tc.state, nil)
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("got %v, want ErrMismatch", err)
			}
			for _, s := range tc.texts {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v does not say %s", err, s)
				}
			}
			t.Log(err)
		})
	}
	t.Run("not covered", func(t *testing.T) {
		part := t.TempDir()
		if err := Save(ctx, part, State{"b": flatPiece(m["b"], 0, 5)}, nil); err != nil {
			t.Fatal(err)
		}
		err := Load(ctx, part, State{"b": Whole(tensor.New(tensor.Float64, 13))}, nil)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "5 of the 13") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no checkpoint", func(t *testing.T) {
		empty := t.TempDir()
		err := Load(ctx, empty, State{}, nil)
		if !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "no committed checkpoint in "+empty) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestHostileMetadata(t *testing.T) {
	dir := saveWhole(t, model(8))
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := shardFile(0, meta.SaveID)
	good, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	files := fmt.Sprintf(`"files":{%q:{"rank":0,"size":%d,"crc32c":%d}}`, f, meta.Files[f].Size, meta.Files[f].CRC32C)
	entry := func(e string) string {
		return fmt.Sprintf(`{"version":1,"save_id":%q,"world_size":1,%s,"entries":{"a":%s}}`, meta.SaveID, files, e)
	}
	piece := func(p string) string {
		return entry(fmt.Sprintf(`{"dtype":"float32","shape":[5,7],"pieces":[%s]}`, p))
	}
	for name, body := range map[string]string{
		"empty":            "",
		"bad JSON":         `{"version":1,`,
		"not an object":    `[1,2]`,
		"version":          strings.Replace(string(good), `"version": 1`, `"version": 99`, 1),
		"save id":          strings.Replace(string(good), meta.SaveID, "../../x", -1),
		"world size":       strings.Replace(string(good), `"world_size": 1`, `"world_size": -1`, 1),
		"file traversal":   fmt.Sprintf(`{"version":1,"save_id":%q,"world_size":1,"files":{"../../etc/passwd":{"rank":0,"size":100,"crc32c":0}},"entries":{}}`, meta.SaveID),
		"file rank":        fmt.Sprintf(`{"version":1,"save_id":%q,"world_size":1,"files":{%q:{"rank":5,"size":100,"crc32c":0}},"entries":{}}`, meta.SaveID, shardFile(5, meta.SaveID)),
		"dtype":            entry(`{"dtype":"complex128","shape":[5,7],"pieces":[]}`),
		"huge shape":       entry(`{"dtype":"float32","shape":[4611686018427387904,4611686018427387904],"pieces":[]}`),
		"int overflow":     entry(`{"dtype":"float32","shape":[99999999999999999999999],"pieces":[]}`),
		"negative shape":   entry(`{"dtype":"float32","shape":[-5,7],"pieces":[]}`),
		"offsets past end": piece(fmt.Sprintf(`{"file":%q,"offsets":[3,0],"lengths":[5,7]}`, f)),
		"negative offset":  piece(fmt.Sprintf(`{"file":%q,"offsets":[-1,0],"lengths":[5,7]}`, f)),
		"huge lengths":     piece(fmt.Sprintf(`{"file":%q,"offsets":[0,0],"lengths":[9223372036854775807,7]}`, f)),
		"flat past end":    piece(fmt.Sprintf(`{"file":%q,"offsets":[30],"lengths":[9223372036854775800],"flat":true}`, f)),
		"too few offsets":  piece(fmt.Sprintf(`{"file":%q,"offsets":[0],"lengths":[5,7]}`, f)),
		"unlisted file":    piece(`{"file":"__0_abc.safetensors","offsets":[0,0],"lengths":[5,7]}`),
		"file size":        strings.Replace(string(good), fmt.Sprintf(`"size": %d`, meta.Files[f].Size), `"size": 99999999999999`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, MetadataFile), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Load(context.Background(), dir, State{"a": Whole(tensor.New(tensor.Float32, 5, 7))}, nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

func TestAsyncSaveWritesSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m := model(9)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		st := fsdpState(m, g.Rank(), 2)
		w := AsyncSave(ctx, dir, st, g)
		// Training goes on: the tensors change and the group is used.
		for _, s := range st {
			b := s.Local.Bytes()
			for i := range b {
				b[i] = 0xee
			}
		}
		x := tensor.FromFloat32([]float32{1, 2, 3}, 3)
		for range 5 {
			if err := g.AllReduce(ctx, x, dist.Sum); err != nil {
				return err
			}
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		// A second save after the first is done, then a load.
		want := fsdpState(m, g.Rank(), 2)
		if err := AsyncSave(ctx, dir, want, g).Wait(ctx); err != nil {
			return err
		}
		got := empty(want)
		if err := Load(ctx, dir, got, g); err != nil {
			return err
		}
		return sameState(got, want)
	})
	want := wholeState(m)
	got := empty(want)
	if err := Load(ctx, dir, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := sameState(got, want); err != nil {
		t.Fatal(err)
	}
}

// A shard file that is not safetensors at all, with a record that vouches
// for its size and checksum, fails in the decoder, naming file and tensor.
func TestUndecodableShard(t *testing.T) {
	dir := saveWhole(t, model(10))
	meta, err := readMetadata(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := shardFile(0, meta.SaveID)
	junk := bytes.Repeat([]byte{0xff}, 64)
	if err := os.WriteFile(filepath.Join(dir, f), junk, 0o644); err != nil {
		t.Fatal(err)
	}
	meta.Files[f] = fileMeta{Rank: 0, Size: int64(len(junk)), CRC32C: crc32c.Checksum(junk)}
	if err := writeMetadata(dir, meta); err != nil {
		t.Fatal(err)
	}
	err = Load(context.Background(), dir, State{"b": Whole(tensor.New(tensor.Float64, 13))}, nil)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, checkpoint.ErrFormat) || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("got %v, want ErrCorrupt and checkpoint.ErrFormat naming %s and \"b\"", err, f)
	}
	t.Log(err)
}

// Save creates the directory, also when rank 0 has nothing to write.
func TestSaveCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	m := model(11)
	disttest.Spawn(t, 2, func(g *dist.Group) error {
		st := State{}
		if g.Rank() == 1 {
			st["b"] = Whole(m["b"])
		}
		return Save(context.Background(), dir, st, g)
	})
	got := State{"b": Whole(tensor.New(tensor.Float64, 13))}
	if err := Load(context.Background(), dir, got, nil); err != nil {
		t.Fatal(err)
	}
	if err := sameState(got, State{"b": Whole(m["b"])}); err != nil {
		t.Fatal(err)
	}
}
