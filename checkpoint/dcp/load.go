package dcp

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/crc32c"
)

// request is one piece the caller asks for.
type request struct {
	name    string
	reg     region
	dst     []byte
	dtype   string
	size    int // bytes of one element
	covered bitset
}

// fill is one saved piece to copy (in part) into a request.
type fill struct {
	req   *request
	piece region
}

// Load fills this rank's pieces of state from the checkpoint committed in
// dir, whatever world size and sharding saved it: a requested piece is
// copied together from every saved piece it overlaps. The Local tensors
// must be contiguous and are written in place; nothing else is changed,
// and on error they may be partly written.
//
// Load reads the metadata, then only the shard files that hold part of
// what is asked, one at a time: memory beyond the state is one file's
// tensors. Each file's size and CRC-32C are checked against the metadata
// before it is decoded. Load issues no collectives and each member may
// ask for other pieces; g names this rank in errors and may be nil.
//
// Errors wrap ErrNoCheckpoint (no .metadata in dir), ErrMismatch (a tensor
// the checkpoint lacks, another dtype or shape: both are named; elements
// no saved piece covers), ErrCorrupt (malformed metadata, a shard file
// missing, truncated, failing its checksum or not decoding: the file and
// the tensor are named) or ErrInvalidState. Hostile files give errors,
// never panics, and allocations are bounded by the state and the files'
// real sizes.
func Load(ctx context.Context, dir string, state State, g *dist.Group) error {
	who := ""
	if g != nil {
		who = fmt.Sprintf(" (rank %d)", g.Rank())
	}
	m, err := readMetadata(dir)
	if err != nil {
		return err
	}
	byFile := map[string][]fill{}
	var reqs []*request
	for _, name := range state.sortedNames() {
		s := state[name]
		r, err := s.region()
		if err != nil {
			return errorf(ErrInvalidState, err, "load%s: tensor %q", who, name)
		}
		if !s.Local.IsContiguous() {
			return errorf(ErrInvalidState, nil, "load%s: tensor %q: the local tensor must be contiguous to be filled in place", who, name)
		}
		e, ok := m.Entries[name]
		if !ok {
			return errorf(ErrMismatch, nil, "load%s: tensor %q is not in the checkpoint in %s", who, name, dir)
		}
		if d := s.Local.DType().String(); e.DType != d {
			return errorf(ErrMismatch, nil, "load%s: tensor %q is %s in the checkpoint in %s but %s in the state", who, name, e.DType, dir, d)
		}
		if !slices.Equal(e.Shape, r.global) && !(len(e.Shape) == 0 && len(r.global) == 0) {
			return errorf(ErrMismatch, nil, "load%s: tensor %q has shape %v in the checkpoint in %s but %v in the state", who, name, e.Shape, dir, r.global)
		}
		req := &request{name: name, reg: r, dst: s.Local.Bytes(), dtype: e.DType, size: s.Local.DType().Size(), covered: newBitset(r.count())}
		reqs = append(reqs, req)
		lo, hi := r.span()
		for _, p := range e.Pieces {
			pr := region{global: e.Shape, offsets: p.Offsets, lengths: p.Lengths, flat: p.Flat}
			if plo, phi := pr.span(); plo < hi && lo < phi {
				byFile[p.File] = append(byFile[p.File], fill{req, pr})
			}
		}
	}

	files := make([]string, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, file := range files {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("dcp: load%s from %s: %w", who, dir, err)
		}
		if err := loadFile(dir, file, m.Files[file], byFile[file], who); err != nil {
			return err
		}
	}
	for _, req := range reqs {
		if n := req.covered.count(); n != req.reg.count() {
			return errorf(ErrMismatch, nil, "load%s: tensor %q: the checkpoint in %s holds %d of the %d elements asked for (offsets %v, shape %v)",
				who, req.name, dir, n, req.reg.count(), req.reg.offsets, req.reg.localShape())
		}
	}
	return nil
}

// loadFile checks one shard file against its metadata, decodes it and
// copies what the fills need.
func loadFile(dir, file string, fm fileMeta, fills []fill, who string) error {
	var names []string
	for _, f := range fills {
		if !slices.Contains(names, f.req.name) {
			names = append(names, f.req.name)
		}
	}
	path := filepath.Join(dir, file)
	what := fmt.Sprintf("load%s: file %s (holding tensor %s)", who, path, quoteList(names))
	f, err := os.Open(path)
	if err != nil {
		return errorf(ErrCorrupt, err, "%s", what)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return errorf(ErrCorrupt, err, "%s", what)
	}
	if st.Size() != fm.Size {
		return errorf(ErrCorrupt, nil, "%s: %d bytes, the metadata says %d", what, st.Size(), fm.Size)
	}
	crc, err := fileCRC(f, fm.Size)
	if err != nil {
		return errorf(ErrCorrupt, err, "%s", what)
	}
	if crc != fm.CRC32C {
		return errorf(ErrCorrupt, nil, "%s: CRC-32C %08x, the metadata says %08x", what, crc, fm.CRC32C)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return errorf(ErrCorrupt, err, "%s", what)
	}
	ts, _, err := checkpoint.Load(f)
	if err != nil {
		return errorf(ErrCorrupt, err, "%s", what)
	}
	for _, fl := range fills {
		t, ok := ts[fl.req.name]
		if !ok {
			return errorf(ErrCorrupt, nil, "load%s: file %s has no tensor %q, which the metadata places there", who, path, fl.req.name)
		}
		want := fl.piece.localShape()
		if t.DType().String() != fl.req.dtype || !slices.Equal(t.Shape(), want) {
			return errorf(ErrCorrupt, nil, "load%s: file %s: tensor %q is %v%v, the metadata says %s%v",
				who, path, fl.req.name, t.DType(), t.Shape(), fl.req.dtype, want)
		}
		src := t.Bytes()
		sz := fl.req.size
		overlap(fl.req.reg, fl.piece, func(n, dst, from int) {
			copy(fl.req.dst[dst*sz:(dst+n)*sz], src[from*sz:(from+n)*sz])
			fl.req.covered.setRange(dst, dst+n)
		})
	}
	return nil
}

func fileCRC(f *os.File, size int64) (uint32, error) {
	buf := make([]byte, min(size, 1<<20))
	var crc uint32
	left := size
	for left > 0 {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), left)])
		crc = crc32c.Update(crc, buf[:n])
		left -= int64(n)
		if err != nil {
			return 0, err
		}
	}
	return crc, nil
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// bitset marks the elements of a request that have been filled.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) setRange(lo, hi int) {
	for lo < hi && lo%64 != 0 {
		b[lo/64] |= 1 << (lo % 64)
		lo++
	}
	for ; lo+64 <= hi; lo += 64 {
		b[lo/64] = ^uint64(0)
	}
	for ; lo < hi; lo++ {
		b[lo/64] |= 1 << (lo % 64)
	}
}

func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}
