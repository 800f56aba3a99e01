package dcp

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/internal/crc32c"
	"github.com/godist/godist/tensor"
)

// plan is what one rank tells the others before writing: the pieces it
// holds (or why its state is invalid) and, from rank 0, the save id.
type plan struct {
	SaveID string
	Pieces []planPiece
	Err    string
}

type planPiece struct {
	Name    string
	DType   string
	Global  []int
	Offsets []int
	Lengths []int
	Flat    bool
}

// written is what one rank tells the others after writing its file.
type written struct {
	File   string // "" if the rank had nothing to write
	Size   int64
	CRC32C uint32
	Err    string
}

// testHookBeforeCommit, when set, runs on rank 0 after every rank has
// written its file and before the metadata is committed; an error from it
// fails the save there, as a crash would.
var testHookBeforeCommit func() error

// Save writes a checkpoint of state into dir: each rank of g its pieces,
// then rank 0 the metadata that commits them. Every member of g must call
// it (it is a collective: three object collectives on g, in the order of
// the member's other calls), and dir must be the same directory for all
// (a shared file system, unless g has one member). It returns the same
// error on every member. A nil g saves from one process, as rank 0 of 1.
//
// A piece held by several ranks (same tensor, same offsets and shape: a
// replicated parameter) is written once, by the lowest rank holding it.
// The members must agree on each tensor's dtype and global shape.
//
// Each rank's file is __<rank>_<id>.safetensors, id being new for every
// save, and holds the CRC-32C recorded in the metadata. The metadata is
// written last, to a temporary file that is synced and renamed over
// .metadata, and the directory is synced: until then a checkpoint already
// in dir stays whole and loadable, and a save that fails or is
// interrupted leaves it so. After the commit rank 0 removes the files of
// other saves. Two saves into one directory must not overlap.
//
// Save only reads the tensors; it must not run while they are modified
// (see AsyncSave).
func Save(ctx context.Context, dir string, state State, g *dist.Group) error {
	// Agree on the save id and the pieces; a rank with an invalid state
	// says so here, so that all fail together instead of some waiting.
	rank, size := 0, 1
	if g != nil {
		rank, size = g.Rank(), g.Size()
	}
	var mine plan
	pieces, err := planState(state)
	if err != nil {
		mine.Err = err.Error()
	}
	mine.Pieces = pieces
	if rank == 0 {
		var id [8]byte
		rand.Read(id[:])
		mine.SaveID = hex.EncodeToString(id[:])
	}
	plans, err := allGather(ctx, g, mine)
	if err != nil {
		return fmt.Errorf("dcp: save to %s: %w", dir, err)
	}
	saveID := plans[0].SaveID
	if !saveIDPattern.MatchString(saveID) {
		return fmt.Errorf("dcp: save to %s: rank 0 sent save id %q", dir, saveID)
	}
	entries, writers, err := mergePlans(plans)
	if err != nil {
		return err
	}

	// Write this rank's file.
	var res written
	mineToWrite := map[string]*tensor.Tensor{}
	for _, name := range state.sortedNames() {
		if writers[name] != nil && slices.Contains(writers[name], rank) {
			mineToWrite[name] = state[name].Local
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Err = err.Error()
	} else if len(mineToWrite) > 0 {
		res.File = shardFile(rank, saveID)
		res.Size, res.CRC32C, err = writeShard(dir, res.File, mineToWrite, saveID, rank)
		if err != nil {
			res.Err = err.Error()
		}
	}
	results, err := allGather(ctx, g, res)
	if err != nil {
		if res.File != "" {
			os.Remove(filepath.Join(dir, res.File))
		}
		return fmt.Errorf("dcp: save to %s: %w", dir, err)
	}
	for r, w := range results {
		if w.Err != "" {
			if res.File != "" {
				os.Remove(filepath.Join(dir, res.File))
			}
			return fmt.Errorf("dcp: save to %s: rank %d: %s", dir, r, w.Err)
		}
	}

	// Commit on rank 0, and tell everyone how it went.
	var commitErr string
	if rank == 0 {
		m := &metadata{Version: Version, SaveID: saveID, WorldSize: size, Files: map[string]fileMeta{}, Entries: entries}
		for r, w := range results {
			if w.File != "" {
				if w.File != shardFile(r, saveID) {
					commitErr = fmt.Sprintf("rank %d wrote %q, want %q", r, w.File, shardFile(r, saveID))
				}
				m.Files[w.File] = fileMeta{Rank: r, Size: w.Size, CRC32C: w.CRC32C}
			}
		}
		if commitErr == "" && testHookBeforeCommit != nil {
			if err := testHookBeforeCommit(); err != nil {
				commitErr = err.Error()
			}
		}
		if commitErr == "" {
			if err := writeMetadata(dir, m); err != nil {
				commitErr = "writing " + MetadataFile + ": " + err.Error()
			} else {
				removeOtherSaves(dir, saveID)
			}
		}
	}
	if err := broadcast(ctx, g, &commitErr); err != nil {
		return fmt.Errorf("dcp: save to %s: %w", dir, err)
	}
	if commitErr != "" {
		if res.File != "" {
			os.Remove(filepath.Join(dir, res.File))
		}
		return fmt.Errorf("dcp: save to %s: commit on rank 0: %s", dir, commitErr)
	}
	return nil
}

// allGather is dist.AllGatherObject, or v alone without a group.
func allGather[T any](ctx context.Context, g *dist.Group, v T) ([]T, error) {
	if g == nil {
		return []T{v}, nil
	}
	return dist.AllGatherObject(ctx, g, v)
}

// broadcast is dist.BroadcastObject from rank 0, or nothing without a
// group.
func broadcast[T any](ctx context.Context, g *dist.Group, v *T) error {
	if g == nil {
		return nil
	}
	return dist.BroadcastObject(ctx, g, v, 0)
}

// planState describes this rank's pieces, sorted by name.
func planState(state State) ([]planPiece, error) {
	var out []planPiece
	for _, name := range state.sortedNames() {
		s := state[name]
		r, err := s.region()
		if err != nil {
			return nil, errorf(ErrInvalidState, err, "tensor %q", name)
		}
		out = append(out, planPiece{
			Name: name, DType: s.Local.DType().String(), Global: nonNil(r.global),
			Offsets: nonNil(r.offsets), Lengths: nonNil(r.lengths), Flat: r.flat,
		})
	}
	return out, nil
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return slices.Clone(s)
}

// mergePlans checks the ranks' plans against each other and returns the
// metadata entries (pieces without their checksums yet) and, for each
// tensor, the ranks that write a piece of it. It is a pure function of
// plans, so every rank decides the same.
func mergePlans(plans []plan) (map[string]entryMeta, map[string][]int, error) {
	for r, p := range plans {
		if p.Err != "" {
			return nil, nil, errorf(ErrInvalidState, nil, "save: rank %d: %s", r, p.Err)
		}
	}
	entries := map[string]entryMeta{}
	writers := map[string][]int{}
	owner := map[string]int{} // first rank holding a tensor, for messages
	seen := map[string]bool{}
	for r, p := range plans {
		for _, pc := range p.Pieces {
			e, ok := entries[pc.Name]
			if !ok {
				e = entryMeta{DType: pc.DType, Shape: nonNil(pc.Global)}
				owner[pc.Name] = r
			} else if e.DType != pc.DType || !slices.Equal(e.Shape, pc.Global) {
				return nil, nil, errorf(ErrInvalidState, nil, "save: tensor %q is %s%v on rank %d but %s%v on rank %d",
					pc.Name, e.DType, e.Shape, owner[pc.Name], pc.DType, pc.Global, r)
			}
			// A piece seen on a lower rank is a replica: that rank writes it.
			key := fmt.Sprintf("%q %t %v %v", pc.Name, pc.Flat, pc.Offsets, pc.Lengths)
			dup := seen[key]
			seen[key] = true
			reg := region{global: pc.Global, offsets: pc.Offsets, lengths: pc.Lengths, flat: pc.Flat}
			if !dup && reg.count() > 0 {
				e.Pieces = append(e.Pieces, pieceMeta{File: shardFile(r, "x"), Offsets: nonNil(pc.Offsets), Lengths: nonNil(pc.Lengths), Flat: pc.Flat})
				writers[pc.Name] = append(writers[pc.Name], r)
			}
			entries[pc.Name] = e
		}
	}
	// The file names take the save id, known to all: fill it in now.
	if len(plans) > 0 {
		for name, e := range entries {
			for i, r := range writers[name] {
				e.Pieces[i].File = shardFile(r, plans[0].SaveID)
			}
			if e.Pieces == nil {
				e.Pieces = []pieceMeta{}
			}
			entries[name] = e
		}
	}
	return entries, writers, nil
}

// writeShard writes tensors to dir/file (through a temporary file, synced
// and renamed) and returns its size and CRC-32C.
func writeShard(dir, file string, tensors map[string]*tensor.Tensor, saveID string, rank int) (size int64, crc uint32, err error) {
	f, err := os.CreateTemp(dir, "."+file+".tmp*")
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	cw := &crcWriter{w: f}
	bw := bufio.NewWriterSize(cw, 1<<20)
	meta := map[string]string{"dcp_save_id": saveID, "dcp_rank": strconv.Itoa(rank)}
	if err := checkpoint.Save(bw, tensors, meta); err != nil {
		return 0, 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, 0, err
	}
	if err := f.Chmod(0o644); err != nil {
		return 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, 0, err
	}
	if err := f.Close(); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, file)); err != nil {
		return 0, 0, err
	}
	if err := syncDir(dir); err != nil {
		return 0, 0, err
	}
	return cw.n, cw.crc, nil
}

type crcWriter struct {
	w   io.Writer
	n   int64
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32c.Update(c.crc, p[:n])
	c.n += int64(n)
	return n, err
}

// removeOtherSaves deletes the shard files of saves other than keep (the
// one just committed, or failed saves' leftovers). Failures are ignored:
// the files are unreferenced either way.
func removeOtherSaves(dir, keep string) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		if m := filePattern.FindStringSubmatch(de.Name()); m != nil && m[2] != keep {
			os.Remove(filepath.Join(dir, de.Name()))
		}
	}
	syncDir(dir)
}

// AsyncSave is Save in the background. It copies this rank's pieces
// before returning, so the caller may go on modifying the tensors (the
// next training step) while the copies are written; the checkpoint holds
// the values of the call. Wait on the returned Work for the result.
//
// Every member of g must call it, in the same order relative to its other
// calls on g: it makes a subgroup of all of g's members there (a
// collective on g), and the save's own collectives run on that subgroup,
// which numbers its calls apart from g, so the caller's collectives on g
// may run while the save is in flight. The subgroup is destroyed when the
// save ends. Memory: one copy of the local pieces until the Work is done.
// Wait for one AsyncSave before starting another into the same directory.
func AsyncSave(ctx context.Context, dir string, state State, g *dist.Group) *dist.Work {
	snap := make(State, len(state))
	for name, s := range state {
		c := s
		c.Global = slices.Clone(s.Global)
		c.Offset = slices.Clone(s.Offset)
		if s.Local != nil && s.Local.Sized() {
			c.Local = s.Local.Clone()
		}
		snap[name] = c
	}
	if g == nil {
		return dist.Go(func() error { return Save(ctx, dir, snap, nil) })
	}
	all := make([]int, g.Size())
	for i := range all {
		all[i] = i
	}
	sub, err := g.NewGroup(ctx, all)
	if err == nil && sub == nil {
		err = errors.New("dcp: async save: this rank is not in its own subgroup")
	}
	if err != nil {
		return dist.Go(func() error { return fmt.Errorf("dcp: async save to %s: %w", dir, err) })
	}
	return dist.Go(func() error {
		defer sub.Destroy()
		return Save(ctx, dir, snap, sub)
	})
}
