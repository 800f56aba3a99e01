package data

import (
	"errors"
	"fmt"
	"go/build"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/godist/godist/tensor"
)

// A byte-level text corpus for language models: the files of a directory
// tree, every byte a token.
const (
	// TextVocab is the vocabulary size of a TextCorpus: the 256 byte
	// values.
	TextVocab = 256
	// TextSeparator is the byte written between consecutive files of a
	// split: NUL, which Go source cannot contain (the compiler rejects
	// it), so in a corpus of Go code it marks the end of a file and
	// nothing else. Files that contain NUL themselves are kept as they
	// are.
	TextSeparator byte = 0
	// DefaultTextGlob is the file-name pattern a TextCorpus takes when
	// TextCorpusOptions.Glob is empty.
	DefaultTextGlob = "*.go"
	// DefaultMaxFileSize is the size cap (1 MiB) a TextCorpus takes when
	// TextCorpusOptions.MaxFileSize is 0. In Go's own source it skips a
	// handful of generated files (tables, rewrite rules) that would
	// otherwise be a large share of the bytes.
	DefaultMaxFileSize = 1 << 20
	// DefaultValFraction is the validation share a TextCorpus takes when
	// TextCorpusOptions.ValFraction is 0.
	DefaultValFraction = 0.1
)

// Errors from NewTextCorpus and the window constructors wrap one of these
// (a missing root wraps fs.ErrNotExist instead), so callers can tell them
// apart with errors.Is; the text names the path or sizes involved and the
// remedy.
var (
	// ErrNoTextFiles: no file under the root matches the glob (after
	// symlinks and files over the size cap are skipped).
	ErrNoTextFiles = errors.New("data: no text files")
	// ErrEmptySplit: files were found but every one hashed to the same
	// split, or the other split's files are all empty.
	ErrEmptySplit = errors.New("data: empty split")
	// ErrSplitTooShort: a split is too short for one window (or, for
	// evaluation, one global batch of windows) of the block size asked
	// for.
	ErrSplitTooShort = errors.New("data: split too short")
	// ErrTextOption: an option out of range: a bad glob or validation
	// fraction, or a batch size or block below 1, a world below 1, a rank
	// outside the world, a negative batch cap.
	ErrTextOption = errors.New("data: bad text corpus option")
)

// Split names one side of a TextCorpus.
type Split int

const (
	// Train is the training split.
	Train Split = iota
	// Validation is the validation split.
	Validation
)

// String returns "train" or "validation".
func (s Split) String() string {
	switch s {
	case Train:
		return "train"
	case Validation:
		return "validation"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// TextCorpusOptions configure NewTextCorpus. The zero value takes every
// *.go file of at most 1 MiB and puts about a tenth of them in the
// validation split.
type TextCorpusOptions struct {
	// Glob is matched against each file's base name with path.Match;
	// "" means DefaultTextGlob ("*.go").
	Glob string
	// MaxFileSize skips files larger than this many bytes; 0 means
	// DefaultMaxFileSize (1 MiB), a negative value means no cap.
	MaxFileSize int64
	// ValFraction is the share of files hashed to the validation split,
	// strictly between 0 and 1; 0 means DefaultValFraction (0.1). It is
	// a share of files, not of bytes, and only in expectation: see
	// NewTextCorpus for how a file's side is decided.
	ValFraction float64
}

// TextFile is one file of a TextCorpus.
type TextFile struct {
	// Path is the file's path relative to the corpus root, with slashes
	// as separators on every system.
	Path string
	// Size is the number of bytes of the file in the corpus.
	Size int
	// Split is the side the file's path hashed to.
	Split Split
	// Offset is where the file's bytes start in its split's data.
	Offset int
}

// TextCorpus is a byte-level corpus read from the files of a directory
// tree and cut into a training and a validation split by file (see
// NewTextCorpus). Its data does not change after loading; a TextCorpus is
// safe for concurrent use.
type TextCorpus struct {
	root   string
	files  []TextFile
	data   [2]*tensor.Tensor // uint8, 1-D, off the Go heap when large
	nfiles [2]int

	skippedLinks, skippedLarge int
}

// NewTextCorpus reads every regular file under root whose base name
// matches opt.Glob and whose size is at most opt.MaxFileSize. Symbolic
// links below root are skipped, files and directories alike (root itself
// may be one). Files are taken in the sorted order of their paths relative
// to root (slash-separated), whatever the order the system lists them in.
//
// A file's split is a function of its relative path alone, so it is the
// same on every machine, under any root the tree is copied to, and
// whatever other files are present: the file is in the validation split
// when the FNV-1a 64-bit hash of its slash-separated relative path, modulo
// 1000, is below round(ValFraction×1000), and in the training split
// otherwise. Each split's data is its files' bytes, in path order, with
// TextSeparator between consecutive files (none before the first or after
// the last).
//
// Errors: root missing (wrapping fs.ErrNotExist) or not a directory, a walk
// or read failure (naming the path; a file that shrinks between the walk
// and its read is one, a file that grows is read up to the size it had),
// an option out of range (ErrTextOption), no matching file
// (ErrNoTextFiles), or a split with no bytes (ErrEmptySplit, which suggests
// a fraction).
//
// The files are read once, straight into each split's storage, which is
// allocated once, by up to 4 goroutines (no more than GOMAXPROCS); the
// storage lives off the Go heap (tensor.NewOffHeap), as
// Fashion-MNIST's does, so tens of megabytes of text do not raise the
// garbage collector's heap goal.
func NewTextCorpus(root string, opt TextCorpusOptions) (*TextCorpus, error) {
	glob, maxSize, threshold, err := textOptions(opt)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("data: text corpus root (pass an existing directory; GoRootSource finds Go's source tree): %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("data: text corpus root %s is not a directory; pass the directory that holds the files", root)
	}
	// WalkDir does not descend into a root that is a symlink: walk what
	// it points to.
	walkRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("data: text corpus root: %w", err)
	}

	c := &TextCorpus{root: root}
	err = filepath.WalkDir(walkRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if ok, _ := path.Match(glob, d.Name()); !ok {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			c.skippedLinks++
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if maxSize >= 0 && info.Size() > maxSize {
			c.skippedLarge++
			return nil
		}
		rel, err := filepath.Rel(walkRoot, p)
		if err != nil {
			return err
		}
		c.files = append(c.files, TextFile{Path: filepath.ToSlash(rel), Size: int(info.Size())})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data: reading text corpus %s: %w", root, err)
	}
	if len(c.files) == 0 {
		return nil, fmt.Errorf("%w: none under %s match %q (%d symlinks and %d files over %d bytes skipped); check the root and TextCorpusOptions.Glob", ErrNoTextFiles, root, glob, c.skippedLinks, c.skippedLarge, maxSize)
	}
	slices.SortFunc(c.files, func(a, b TextFile) int { return strings.Compare(a.Path, b.Path) })

	// Lay the files out, then read each one into its place.
	var size [2]int
	for i := range c.files {
		f := &c.files[i]
		f.Split = splitOf(f.Path, threshold)
		if c.nfiles[f.Split] > 0 {
			size[f.Split]++ // the separator before this file
		}
		f.Offset = size[f.Split]
		size[f.Split] += f.Size
		c.nfiles[f.Split]++
	}
	if err := c.checkSplits(size, opt); err != nil {
		return nil, err
	}
	var buf [2][]byte
	for s := range c.data {
		c.data[s] = tensor.NewOffHeap(tensor.Uint8, size[s])
		buf[s] = c.data[s].Uint8s()
	}
	if err := c.read(walkRoot, buf, readers); err != nil {
		return nil, err
	}
	return c, nil
}

// readers is the number of goroutines NewTextCorpus reads files with
// (at most GOMAXPROCS). On the project's 2-CPU VM, 2 load Go's source
// (84 MB, 7708 files) in 124-130 ms against 175-220 ms for one
// (BenchmarkTextCorpusReaders, which the tests may change it for); more
// CPUs were not measured.
var readers = 4

// read fills buf with the files' bytes and separators. Opening and reading
// a file is a few system calls that wait on nothing but the kernel, so
// several goroutines take the files in turn; each file has its own place
// in buf, so the result is the same in any order. The error is that of the
// first failing file in path order.
func (c *TextCorpus) read(walkRoot string, buf [2][]byte, workers int) error {
	errs := make([]error, len(c.files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, runtime.GOMAXPROCS(0), len(c.files))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(c.files) {
					return
				}
				f := c.files[i]
				b := buf[f.Split]
				if f.Offset > 0 {
					b[f.Offset-1] = TextSeparator
				}
				errs[i] = readInto(filepath.Join(walkRoot, filepath.FromSlash(f.Path)), b[f.Offset:f.Offset+f.Size])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// textOptions applies the defaults and checks the options.
func textOptions(opt TextCorpusOptions) (glob string, maxSize int64, threshold int, err error) {
	glob = opt.Glob
	if glob == "" {
		glob = DefaultTextGlob
	}
	if _, err := path.Match(glob, ""); err != nil {
		return "", 0, 0, fmt.Errorf("%w: Glob %q: %w", ErrTextOption, glob, err)
	}
	maxSize = opt.MaxFileSize
	switch {
	case maxSize == 0:
		maxSize = DefaultMaxFileSize
	case maxSize < 0:
		maxSize = -1
	}
	frac := opt.ValFraction
	if frac == 0 {
		frac = DefaultValFraction
	}
	if !(frac > 0 && frac < 1) {
		return "", 0, 0, fmt.Errorf("%w: ValFraction %v is not strictly between 0 and 1 (0 means %v)", ErrTextOption, opt.ValFraction, DefaultValFraction)
	}
	return glob, maxSize, int(math.Round(frac * 1000)), nil
}

// splitOf is the side of the file at relative slash path rel: Validation
// when FNV-1a 64 of rel modulo 1000 is below threshold.
func splitOf(rel string, threshold int) Split {
	h := fnv.New64a()
	io.WriteString(h, rel)
	if h.Sum64()%1000 < uint64(threshold) {
		return Validation
	}
	return Train
}

// checkSplits reports a split that has no bytes.
func (c *TextCorpus) checkSplits(size [2]int, opt TextCorpusOptions) error {
	frac := opt.ValFraction
	if frac == 0 {
		frac = DefaultValFraction
	}
	n := len(c.files)
	for s := range size {
		if size[s] > 0 {
			continue
		}
		other := 1 - s
		if c.nfiles[s] > 0 {
			return fmt.Errorf("%w: the %d files of %s's %v split (ValFraction %v) are all empty; add files or change ValFraction", ErrEmptySplit, c.nfiles[s], c.root, Split(s), frac)
		}
		// Suggest a fraction that leaves both sides a few files on
		// average; the hash decides the rest.
		hint := fmt.Sprintf("lower ValFraction (the default is %v) or add files", DefaultValFraction)
		if Split(s) == Validation {
			f := min(0.5, math.Ceil(2000/float64(n))/1000)
			hint = fmt.Sprintf("raise ValFraction (with %d files, %v sends %.1f of them there on average) or add files", n, f, f*float64(n))
		}
		return fmt.Errorf("%w: all %d files under %s hashed to the %v split at ValFraction %v, none to %v; %s", ErrEmptySplit, n, c.root, Split(other), frac, Split(s), hint)
	}
	return nil
}

// readInto fills b with the first len(b) bytes of the file at name.
func readInto(name string, b []byte) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("data: text corpus: %w", err)
	}
	defer f.Close()
	if n, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("data: text corpus: %s shrank while it was loaded (%d bytes at the walk, %d now); load again once it is stable", name, len(b), n)
		}
		return fmt.Errorf("data: text corpus: reading %s: %w", name, err)
	}
	return nil
}

// Root returns the root the corpus was loaded from, as given.
func (c *TextCorpus) Root() string { return c.root }

// Files returns the corpus's files in path order, both splits together.
// The slice is a new copy that belongs to the caller.
func (c *TextCorpus) Files() []TextFile { return slices.Clone(c.files) }

// NumFiles returns the number of files in split s.
func (c *TextCorpus) NumFiles(s Split) int { return c.nfiles[s] }

// Len returns the number of bytes (tokens) of split s, separators
// included.
func (c *TextCorpus) Len(s Split) int { return c.data[s].Numel() }

// Data returns split s as a 1-D uint8 tensor of Len(s) bytes. The tensor
// belongs to the corpus and must be treated as read-only; as with any
// tensor from tensor.NewOffHeap, a slice taken from it (Uint8s) is valid
// only while the tensor or the corpus is reachable.
func (c *TextCorpus) Data(s Split) *tensor.Tensor { return c.data[s] }

// Skipped returns how many files matching the glob were skipped as
// symbolic links and as larger than the size cap.
func (c *TextCorpus) Skipped() (symlinks, tooLarge int) { return c.skippedLinks, c.skippedLarge }

// GoRootSource returns the source tree of the Go installation,
// $(go env GOROOT)/src: GOROOT as go/build knows it (the GOROOT variable
// or the toolchain this program was built with), else what `go env GOROOT`
// prints when a go command is on the PATH. The error wraps fs.ErrNotExist
// when neither names a directory with a src subdirectory.
func GoRootSource() (string, error) {
	var tried []string
	try := func(goroot string) (string, bool) {
		if goroot == "" {
			return "", false
		}
		src := filepath.Join(goroot, "src")
		tried = append(tried, src)
		st, err := os.Stat(src)
		return src, err == nil && st.IsDir()
	}
	if src, ok := try(build.Default.GOROOT); ok {
		return src, nil
	}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if src, ok := try(strings.TrimSpace(string(out))); ok {
			return src, nil
		}
	} else {
		tried = append(tried, fmt.Sprintf("go env GOROOT (%v)", err))
	}
	return "", fmt.Errorf("data: no Go source tree found (tried %s); install Go or pass NewTextCorpus a directory: %w", strings.Join(tried, ", "), fs.ErrNotExist)
}
