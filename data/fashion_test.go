package data

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/godist/godist/tensor"
)

func subsetDir(t *testing.T) string {
	t.Helper()
	d, err := SubsetDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func checkFashion(t *testing.T, x, y *tensor.Tensor, n int) {
	t.Helper()
	if x.DType() != tensor.Float32 || !equalInts(x.Shape(), []int{n, 1, 28, 28}) {
		t.Fatalf("images %v%v, want float32 [%d 1 28 28]", x.DType(), x.Shape(), n)
	}
	if y.DType() != tensor.Int64 || !equalInts(y.Shape(), []int{n}) {
		t.Fatalf("labels %v%v, want int64 [%d]", y.DType(), y.Shape(), n)
	}
	var count [10]int
	for _, c := range y.Int64s() {
		if c < 0 || c > 9 {
			t.Fatalf("label %d", c)
		}
		count[c]++
	}
	for c, k := range count {
		if k == 0 {
			t.Fatalf("no example of class %d among %d", c, n)
		}
	}
	lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range x.Float32s() {
		lo, hi = min(lo, v), max(hi, v)
	}
	// Pixels 0 and 255 both occur in every split.
	if lo != math.Float32frombits(0xbf4f6929) || hi != math.Float32frombits(0x4001734f) {
		t.Fatalf("pixel range [%v, %v]", lo, hi)
	}
}

func TestLoadFashionMNISTSubset(t *testing.T) {
	dir := subsetDir(t)
	x, y, err := LoadFashionMNIST(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	checkFashion(t, x, y, 3000)
	// The first training example of Fashion-MNIST is an ankle boot (9),
	// the second a T-shirt (0).
	if y.Int64s()[0] != 9 || y.Int64s()[1] != 0 {
		t.Fatalf("first labels %v", y.Int64s()[:2])
	}
	x.Release() // off the Go heap: freed by Release, not by the collector
	x, y, err = LoadFashionMNIST(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	checkFashion(t, x, y, 1000)
	x.Release()
}

// The normalisation must match PyTorch's bit for bit. The reference
// values are torch 1.13's for
// ((torch.arange(256, dtype=torch.uint8).float().div_(255.0) - 0.2860) / 0.3530).
func TestFashionNormalisationMatchesTorch(t *testing.T) {
	px := make([]uint8, 256*784)
	for i := range px {
		px[i] = uint8(i / 784)
	}
	x := normalizeFashion(px, 256)
	bits := func(v uint8) uint32 { return math.Float32bits(x.Float32s()[int(v)*784]) }
	var sum uint64
	for v := range 256 {
		sum += uint64(bits(uint8(v)))
	}
	want := map[uint8]uint32{0: 0xbf4f6929, 1: 0xbf4c911b, 128: 0x3f1c9e13, 254: 0x4000bd4c, 255: 0x4001734f}
	for v, w := range want {
		if g := bits(v); g != w {
			t.Errorf("pixel %d: %#x, torch gives %#x", v, g, w)
		}
	}
	if sum != 427645151531 {
		t.Errorf("sum of the 256 results' bits %d, torch gives 427645151531", sum)
	}
}

func TestLoadFashionMNISTFull(t *testing.T) {
	if !hasFashionFiles(FashionMNISTDir) {
		t.Skipf("the full Fashion-MNIST is not installed in %s", FashionMNISTDir)
	}
	dir, full := FindFashionMNIST()
	if dir != FashionMNISTDir || !full {
		t.Fatalf("FindFashionMNIST = %q, %v", dir, full)
	}
	for _, c := range []struct {
		train bool
		n     int
	}{{true, 60000}, {false, 10000}} {
		// The labels are small: read them always.
		name := fashionFiles[1]
		if !c.train {
			name = fashionFiles[3]
		}
		y, err := ReadIDXFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !equalInts(y.Shape(), []int{c.n}) {
			t.Fatalf("%s: shape %v, want [%d]", name, y.Shape(), c.n)
		}
		for i, v := range y.Uint8s() {
			if v > 9 {
				t.Fatalf("%s: label %d at %d", name, v, i)
			}
		}
		// Gunzipping 47 MB of images takes a second, or tens under the
		// race detector.
		if testing.Short() || raceEnabled {
			continue
		}
		x, y2, err := LoadFashionMNIST(dir, c.train)
		if err != nil {
			t.Fatal(err)
		}
		checkFashion(t, x, y2, c.n)
		x.Release()
	}
	if testing.Short() || raceEnabled {
		t.Log("images not read in -short mode or under the race detector")
	}
}

func TestSubsetDirSearchesUpward(t *testing.T) {
	// A fake repository: root/go.mod, root/testdata/fashion-mnist/*, and a
	// working directory two levels down.
	root := t.TempDir()
	sub := filepath.Join(root, "testdata", "fashion-mnist")
	deep := filepath.Join(root, "a", "b")
	for _, d := range []string{sub, deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644)
	for _, name := range fashionFiles {
		os.WriteFile(filepath.Join(sub, name), nil, 0o644)
	}
	t.Setenv(FashionMNISTEnv, t.TempDir()) // not read by the package
	t.Chdir(deep)
	if got, err := SubsetDir(); err != nil || got != sub {
		t.Fatalf("SubsetDir = %q, %v; want %q", got, err, sub)
	}
	// Empty files are found but fail to load, naming the file.
	_, _, err := LoadFashionMNIST(sub, true)
	if !errors.Is(err, ErrIDX) {
		t.Fatalf("loading empty files: %v", err)
	}
}

func TestLoadFashionMNISTErrors(t *testing.T) {
	if _, _, err := LoadFashionMNIST(t.TempDir(), true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty dir: %v", err)
	}
}
