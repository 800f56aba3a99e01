package data

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goSrc is the shipped subset of Go's source (testdata/gosrc: 28 files).
var goSrc = filepath.Join("..", "testdata", "gosrc")

func loadGoSrc(t testing.TB, opt TextCorpusOptions) *TextCorpus {
	t.Helper()
	c, err := NewTextCorpus(goSrc, opt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// splitBytes is split s's data as a slice, valid while c is reachable.
func splitBytes(c *TextCorpus, s Split) []byte { return c.Data(s).Uint8s() }

func TestTextCorpusReadsEveryFile(t *testing.T) {
	c := loadGoSrc(t, TextCorpusOptions{})
	files := c.Files()
	if len(files) != 28 || c.NumFiles(Train)+c.NumFiles(Validation) != 28 {
		t.Fatalf("%d files (%d train, %d validation), want the 28 shipped", len(files), c.NumFiles(Train), c.NumFiles(Validation))
	}
	if !slices.IsSortedFunc(files, func(a, b TextFile) int { return strings.Compare(a.Path, b.Path) }) {
		t.Fatal("files are not in path order")
	}
	var size, count [2]int
	for _, f := range files {
		want, err := os.ReadFile(filepath.Join(goSrc, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		data := splitBytes(c, f.Split)
		if f.Size != len(want) || !bytes.Equal(data[f.Offset:f.Offset+f.Size], want) {
			t.Fatalf("%s: the corpus's %d bytes at %d of %v are not the file's %d", f.Path, f.Size, f.Offset, f.Split, len(want))
		}
		// Files follow one another in path order, one separator between.
		if f.Offset != size[f.Split]+min(count[f.Split], 1) {
			t.Fatalf("%s starts at %d of %v, want %d", f.Path, f.Offset, f.Split, size[f.Split]+min(count[f.Split], 1))
		}
		if f.Offset > 0 && data[f.Offset-1] != TextSeparator {
			t.Fatalf("byte before %s is %d, want the separator", f.Path, data[f.Offset-1])
		}
		size[f.Split] = f.Offset + f.Size
		count[f.Split]++
	}
	for s := range size {
		if c.Len(Split(s)) != size[s] || c.NumFiles(Split(s)) != count[s] {
			t.Errorf("%v: Len %d NumFiles %d, files add up to %d bytes in %d files", Split(s), c.Len(Split(s)), c.NumFiles(Split(s)), size[s], count[s])
		}
	}
	// The two files whose hash buckets are below 100 (see the golden
	// values in TestTextSplitHash).
	var val []string
	for _, f := range files {
		if f.Split == Validation {
			val = append(val, f.Path)
		}
	}
	if !slices.Equal(val, []string{"strings/iter_test.go", "strings/strings.go"}) {
		t.Errorf("validation files %v", val)
	}
}

// The bucket of a path is FNV-1a 64 mod 1000 (values from an independent
// Python implementation of FNV-1a), so the split is pinned across
// versions and machines.
func TestTextSplitHash(t *testing.T) {
	for _, c := range []struct {
		path   string
		bucket int
	}{
		{"strings/iter_test.go", 3},
		{"strings/strings.go", 80},
		{"sort/sort.go", 178},
		{"container/list/list.go", 758},
	} {
		if splitOf(c.path, c.bucket) != Train || splitOf(c.path, c.bucket+1) != Validation {
			t.Errorf("%s is not in bucket %d", c.path, c.bucket)
		}
	}
}

// The split of a file depends on its relative path only: another root,
// other files beside it, and the order files come in change nothing.
func TestTextCorpusSplitIsStable(t *testing.T) {
	opt := TextCorpusOptions{ValFraction: 0.3}
	a := loadGoSrc(t, opt)
	want := map[string]Split{}
	for _, f := range a.Files() {
		want[f.Path] = f.Split
	}

	// A copy under another root, with some files left out, others added
	// and the rest written in a shuffled order.
	root := filepath.Join(t.TempDir(), "elsewhere", "tree")
	files := a.Files()
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	for i, f := range files {
		if i%5 == 0 {
			continue
		}
		src, err := os.ReadFile(filepath.Join(goSrc, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, filepath.FromSlash(f.Path)), src)
	}
	for i := range 20 {
		writeFile(t, filepath.Join(root, "extra", strings.Repeat("x", i+1)+".go"), []byte("package extra\n"))
	}
	b, err := NewTextCorpus(root, opt)
	if err != nil {
		t.Fatal(err)
	}
	common := 0
	for _, f := range b.Files() {
		if s, ok := want[f.Path]; ok {
			common++
			if f.Split != s {
				t.Errorf("%s is in %v under %s but in %v under %s", f.Path, f.Split, root, s, goSrc)
			}
		}
	}
	if common != len(files)-(len(files)+4)/5 {
		t.Fatalf("%d files in common", common)
	}

	// Walking twice gives identical corpora.
	c := loadGoSrc(t, opt)
	for s := range 2 {
		if !bytes.Equal(splitBytes(a, Split(s)), splitBytes(c, Split(s))) {
			t.Fatalf("two loads differ in %v", Split(s))
		}
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Splits are disjoint and cover the files; the fraction moves files only
// from train to validation as it grows.
func TestTextCorpusSplitsCover(t *testing.T) {
	prev := map[string]bool{}
	for _, frac := range []float64{0.1, 0.2, 0.5, 0.8} {
		c := loadGoSrc(t, TextCorpusOptions{ValFraction: frac})
		val := map[string]bool{}
		seen := map[string]bool{}
		for _, f := range c.Files() {
			if seen[f.Path] {
				t.Fatalf("%s twice", f.Path)
			}
			seen[f.Path] = true
			if f.Split == Validation {
				val[f.Path] = true
			}
		}
		if len(seen) != 28 || len(val) != c.NumFiles(Validation) {
			t.Fatalf("fraction %v: %d files, %d validation", frac, len(seen), len(val))
		}
		for p := range prev {
			if !val[p] {
				t.Errorf("fraction %v: %s left the validation split", frac, p)
			}
		}
		prev = val
	}
}

func TestTextCorpusSkips(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a.go"), []byte("package a\n"))
	writeFile(t, filepath.Join(root, "sub", "b.go"), []byte("package b\n"))
	writeFile(t, filepath.Join(root, "sub", "notes.txt"), []byte("not Go\n"))
	writeFile(t, filepath.Join(root, "readme.txt"), []byte("not Go either\n"))
	writeFile(t, filepath.Join(root, "big.go"), bytes.Repeat([]byte("x"), 101))
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "linked", "c.go"), []byte("package c\n"))
	if err := os.Symlink(filepath.Join(root, "a.go"), filepath.Join(root, "link.go")); err != nil {
		t.Skip("no symlinks:", err)
	}
	if err := os.Symlink(filepath.Join(other, "linked"), filepath.Join(root, "linkdir")); err != nil {
		t.Fatal(err)
	}
	// Buckets: a.go 412, big.go 355, sub/b.go 260.
	c, err := NewTextCorpus(root, TextCorpusOptions{MaxFileSize: 100, ValFraction: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(c); !slices.Equal(got, []string{"a.go", "sub/b.go"}) {
		t.Errorf("files %v, want a.go and sub/b.go", got)
	}
	if links, large := c.Skipped(); links != 1 || large != 1 {
		t.Errorf("skipped %d symlinks, %d large; want 1 and 1", links, large)
	}
	// A negative cap takes the big file, and a root that is a symlink is
	// followed.
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	c, err = NewTextCorpus(link, TextCorpusOptions{MaxFileSize: -1, ValFraction: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(c); !slices.Equal(got, []string{"a.go", "big.go", "sub/b.go"}) || c.Root() != link {
		t.Errorf("under %s: files %v", c.Root(), got)
	}
	// Another glob, other files (buckets: readme.txt 113, sub/notes.txt 357).
	c, err = NewTextCorpus(root, TextCorpusOptions{Glob: "*.t?t", ValFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(c); !slices.Equal(got, []string{"readme.txt", "sub/notes.txt"}) || c.NumFiles(Validation) != 1 {
		t.Errorf("*.t?t: files %v", got)
	}
}

func paths(c *TextCorpus) []string {
	var out []string
	for _, f := range c.Files() {
		out = append(out, f.Path)
	}
	return out
}

func TestTextCorpusErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nothing-here")
	_, err := NewTextCorpus(missing, TextCorpusOptions{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing root: %v", err)
	}
	writeFile(t, filepath.Join(dir, "README"), []byte("hello\n"))
	_, err = NewTextCorpus(filepath.Join(dir, "README"), TextCorpusOptions{})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("root is a file: %v", err)
	}
	_, err = NewTextCorpus(dir, TextCorpusOptions{})
	if !errors.Is(err, ErrNoTextFiles) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), `"*.go"`) {
		t.Errorf("no matching files: %v", err)
	}
	// One small file: one split is empty, and the error suggests a fraction.
	writeFile(t, filepath.Join(dir, "a.go"), []byte("package a\n")) // bucket 412: train
	_, err = NewTextCorpus(dir, TextCorpusOptions{})
	if !errors.Is(err, ErrEmptySplit) || !strings.Contains(err.Error(), "raise ValFraction") {
		t.Errorf("one file: %v", err)
	}
	_, err = NewTextCorpus(goSrc, TextCorpusOptions{ValFraction: 0.0001})
	if !errors.Is(err, ErrEmptySplit) || !strings.Contains(err.Error(), "all 28 files") || !strings.Contains(err.Error(), "ValFraction (with 28 files, 0.072") {
		t.Errorf("tiny fraction: %v", err)
	}
	_, err = NewTextCorpus(goSrc, TextCorpusOptions{ValFraction: 0.9999})
	if !errors.Is(err, ErrEmptySplit) || !strings.Contains(err.Error(), "lower ValFraction") {
		t.Errorf("fraction near 1: %v", err)
	}
	for _, opt := range []TextCorpusOptions{{ValFraction: 1}, {ValFraction: -0.1}, {ValFraction: math.NaN()}, {Glob: "[a-"}} {
		if _, err := NewTextCorpus(goSrc, opt); !errors.Is(err, ErrTextOption) {
			t.Errorf("%+v: %v", opt, err)
		}
	}
}

// TestTextCorpusGoRoot loads Go's own source, the corpus the tiny-GPT
// workload trains on.
func TestTextCorpusGoRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("reads Go's source tree")
	}
	src, err := GoRootSource()
	if err != nil {
		t.Skip(err)
	}
	c, err := NewTextCorpus(src, TextCorpusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	total := c.Len(Train) + c.Len(Validation)
	_, large := c.Skipped()
	t.Logf("%s: %d files, %.1f MB (train %d files %.1f MB, validation %d files %.1f MB), %d over 1 MiB skipped",
		src, len(c.Files()), float64(total)/1e6, c.NumFiles(Train), float64(c.Len(Train))/1e6, c.NumFiles(Validation), float64(c.Len(Validation))/1e6, large)
	if total < 10e6 || c.NumFiles(Train) < 1000 || c.NumFiles(Validation) < 100 {
		t.Errorf("only %d bytes, %d + %d files", total, c.NumFiles(Train), c.NumFiles(Validation))
	}
	// About a tenth of the files, and so of the bytes, are for validation.
	if f := float64(c.NumFiles(Validation)) / float64(len(c.Files())); f < 0.07 || f > 0.13 {
		t.Errorf("validation has %.3f of the files", f)
	}
	w, err := c.RandomWindows(Train, WindowOptions{BatchSize: 8, Block: 256, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	x, y := w.Batch(0)
	checkWindowRows(t, c.Data(Train).Uint8s(), w.Starts(0), 256, x, y)
	if _, err := c.EvalWindows(Validation, EvalOptions{BatchSize: 8, Block: 256, MaxBatches: 10}); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkTextCorpusGoRoot(b *testing.B) {
	src, err := GoRootSource()
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		c, err := NewTextCorpus(src, TextCorpusOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(c.Len(Train) + c.Len(Validation)))
	}
}

// BenchmarkTextCorpusReaders compares reading with one goroutine and with
// the default, alternating within one run.
func BenchmarkTextCorpusReaders(b *testing.B) {
	src, err := GoRootSource()
	if err != nil {
		b.Skip(err)
	}
	def := readers
	defer func() { readers = def }()
	for _, n := range []int{1, def, 1, def} {
		b.Run(fmt.Sprint("readers=", n), func(b *testing.B) {
			readers = n
			for b.Loop() {
				c, err := NewTextCorpus(src, TextCorpusOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(c.Len(Train) + c.Len(Validation)))
			}
		})
	}
}
