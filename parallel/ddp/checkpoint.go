package ddp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// A checkpoint written by SaveCheckpoint is one safetensors file holding
// the wrapped module's state dict under ModelPrefix ("model.0.weight",
// without DDP's "module.", so it also loads into the plain module) and the
// optimizer's under OptimPrefix ("optim.state.0.momentum_buffer",
// "optim.param_groups.0.lr").
const (
	ModelPrefix = "model."
	OptimPrefix = "optim."
)

// Metadata keys. SaveCheckpoint stores the caller's metadata as given and
// adds MetaWorldSize and MetaBucketOrder; Position reads and writes the
// first three.
const (
	// MetaEpoch is the epoch training is in: call the sampler's SetEpoch
	// with it on resume.
	MetaEpoch = "epoch"
	// MetaStep counts the optimizer steps taken so far.
	MetaStep = "step"
	// MetaBatch is the data loader's position: the number of batches of
	// epoch MetaEpoch already trained on, which a resumed run skips.
	MetaBatch = "batch"
	// MetaWorldSize is the group size at save time. The loader position
	// is only meaningful for the same world size, since
	// DistributedSampler's shards depend on it.
	MetaWorldSize = "world_size"
	// MetaBucketOrder is DDP's bucket plan (parameter indices in bucket
	// order, each bucket ended by "|"), so that a resumed run reduces gradients in the same layout
	// and its float sums match the uninterrupted run's bit for bit.
	MetaBucketOrder = "ddp.bucket_order"
)

// Position is where training stands, as kept in a checkpoint's metadata.
// Resume by calling the sampler's SetEpoch(Epoch) and skipping the first
// Batch batches of that epoch; Step counts optimizer steps (for logging and
// learning-rate schedules).
type Position struct {
	Epoch, Step, Batch int
}

// Meta returns p as metadata, to pass to SaveCheckpoint (add more keys as
// needed).
func (p Position) Meta() map[string]string {
	return map[string]string{
		MetaEpoch: strconv.Itoa(p.Epoch),
		MetaStep:  strconv.Itoa(p.Step),
		MetaBatch: strconv.Itoa(p.Batch),
	}
}

// ParsePosition reads a Position from checkpoint metadata. A missing key
// reads as 0; a malformed one is an error naming it.
func ParsePosition(meta map[string]string) (Position, error) {
	var p Position
	for _, f := range []struct {
		key string
		dst *int
	}{{MetaEpoch, &p.Epoch}, {MetaStep, &p.Step}, {MetaBatch, &p.Batch}} {
		s, ok := meta[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Position{}, fmt.Errorf("ddp: checkpoint metadata %s=%q is not a count", f.key, s)
		}
		*f.dst = n
	}
	return p, nil
}

// SaveCheckpoint saves model's and opt's state to path: rank 0 writes one
// safetensors file (atomically, through checkpoint.SaveFile: path holds the
// old checkpoint or the complete new one, never a part), then every rank
// waits for rank 0's verdict, so no rank returns — and goes on to read the
// file — before it is complete. Every member of model's group must call it,
// between iterations (not between backward and Wait). opt may be nil to
// save the model alone. meta (may be nil; see MetaEpoch, MetaStep,
// MetaBatch and Position) is stored as the file's metadata, with
// MetaWorldSize and MetaBucketOrder added.
//
// Only rank 0's state is written: DDP keeps the replicas equal. If rank 0
// fails to write, every rank returns an error saying so.
func SaveCheckpoint(ctx context.Context, path string, model *DDP, opt optim.Optimizer, meta map[string]string) error {
	g := model.Group()
	var failed string // rank 0's error, broadcast; "" means written
	var saveErr error
	if g.Rank() == 0 {
		tensors := map[string]*tensor.Tensor{}
		for k, t := range nn.StateDict(model.Module) {
			tensors[ModelPrefix+k] = t
		}
		if opt != nil {
			for k, t := range opt.StateDict() {
				tensors[OptimPrefix+k] = t
			}
		}
		md := maps.Clone(meta)
		if md == nil {
			md = map[string]string{}
		}
		md[MetaWorldSize] = strconv.Itoa(g.Size())
		md[MetaBucketOrder] = model.bucketOrder()
		if saveErr = checkpoint.SaveFile(path, tensors, md); saveErr != nil {
			failed = saveErr.Error()
		}
	}
	// The broadcast is the barrier: the others wait here until rank 0 has
	// renamed the file into place (or failed).
	if err := dist.BroadcastObject(ctx, g, &failed, 0); err != nil {
		return errors.Join(saveErr, fmt.Errorf("ddp: save checkpoint %s: rank %d waiting for rank 0 to write it: %w", path, g.Rank(), err))
	}
	if saveErr != nil {
		return fmt.Errorf("ddp: save checkpoint: %w", saveErr)
	}
	if failed != "" {
		return fmt.Errorf("ddp: save checkpoint %s: rank 0 failed to write it: %s", path, failed)
	}
	return nil
}

// LoadCheckpoint loads a checkpoint written by SaveCheckpoint into model
// (the wrapped module) and opt, on every rank: each member reads the file
// itself, so path must be readable by all (a shared file system, or a copy
// per node). Every member of model's group must call it, before the first
// forward pass of an iteration; afterwards the members agree on the
// outcome, so if any rank failed, every rank returns an error (naming the
// ranks that failed; those return their own error).
//
// Loading is strict, as PyTorch's load_state_dict(strict=True): a model
// key missing from the file, a key the model lacks, a shape mismatch, a
// key with neither prefix, or a file without optimizer state when opt is
// not nil, is an error naming the keys. opt may be nil to load the model
// alone (the file's optimizer state is then ignored). It returns the
// file's metadata (see ParsePosition).
func LoadCheckpoint(ctx context.Context, path string, model *DDP, opt optim.Optimizer) (map[string]string, error) {
	g := model.Group()
	meta, loadErr := loadCheckpoint(path, model, opt)
	status := tensor.New(tensor.Int64, g.Size())
	if loadErr != nil {
		status.Set(1, g.Rank())
	}
	if err := g.AllReduce(ctx, status, dist.Sum); err != nil {
		return nil, errors.Join(loadErr, fmt.Errorf("ddp: load checkpoint %s: rank %d agreeing on the outcome: %w", path, g.Rank(), err))
	}
	if loadErr != nil {
		return nil, loadErr
	}
	var bad []int
	for r, v := range status.Int64s() {
		if v != 0 {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("ddp: load checkpoint %s: ranks %v failed to load it (see their errors); rank %d loaded it but the replicas now differ", path, bad, g.Rank())
	}
	return meta, nil
}

func loadCheckpoint(path string, model *DDP, opt optim.Optimizer) (map[string]string, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("ddp: load checkpoint %s: rank %d: %s", path, model.Group().Rank(), fmt.Sprintf(format, args...))
	}
	tensors, meta, err := checkpoint.LoadFile(path)
	if err != nil {
		return nil, fail("%v", err)
	}
	msd, osd := map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}
	var other []string
	for k, t := range tensors {
		switch {
		case strings.HasPrefix(k, ModelPrefix):
			msd[strings.TrimPrefix(k, ModelPrefix)] = t
		case strings.HasPrefix(k, OptimPrefix):
			osd[strings.TrimPrefix(k, OptimPrefix)] = t
		default:
			other = append(other, k)
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		return nil, fail("keys %s have neither the %q nor the %q prefix; was the file written by ddp.SaveCheckpoint?", strings.Join(other, ", "), ModelPrefix, OptimPrefix)
	}
	if err := nn.LoadStateDict(model.Module, msd, true); err != nil {
		return nil, fail("model (keys without the %q prefix): %v", ModelPrefix, err)
	}
	if opt != nil {
		if len(osd) == 0 {
			return nil, fail("the file holds no optimizer state (no %q keys); pass a nil optimizer to load the model alone", OptimPrefix)
		}
		var missing []string
		for k := range opt.StateDict() {
			if strings.HasPrefix(k, "param_groups.") && osd[k] == nil {
				missing = append(missing, OptimPrefix+k)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return nil, fail("optimizer: missing keys %s (a different optimizer?)", strings.Join(missing, ", "))
		}
		if err := opt.LoadStateDict(osd); err != nil {
			return nil, fail("optimizer (keys without the %q prefix): %v", OptimPrefix, err)
		}
	}
	if s, ok := meta[MetaBucketOrder]; ok {
		if err := model.setBucketOrder(s); err != nil {
			return nil, fail("%v", err)
		}
	}
	return meta, nil
}

// BucketOrder returns DDP's bucket plan (parameter indices in bucket
// order, comma-separated, each bucket ended by "|"), the MetaBucketOrder that SaveCheckpoint
// writes. A program that saves checkpoints its own way stores it too:
// the plan decides the order in which the ranks' gradients are summed, so
// at world 3 and above a resumed run matches the uninterrupted one bit
// for bit only if it reduces in the same plan (SetBucketOrder).
func (d *DDP) BucketOrder() string { return d.bucketOrder() }

// SetBucketOrder re-plans the buckets from a BucketOrder string (between
// iterations), as LoadCheckpoint does with the saved MetaBucketOrder.
func (d *DDP) SetBucketOrder(s string) error { return d.setBucketOrder(s) }

// bucketOrder returns the bucket plan as parameter indices in bucket
// order, comma-separated, each bucket ended by "|" ("3,2|1,0|").
func (d *DDP) bucketOrder() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, bk := range d.mu.buckets {
		for j, i := range bk.params {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(i))
		}
		b.WriteByte('|')
	}
	return b.String()
}

// setBucketOrder re-plans the buckets from a bucketOrder string and marks
// them rebuilt, so that the resumed run reduces in the saved layout. A
// string with bucket ends ("|") gives the buckets themselves, and
// AutoBucketCaps then chooses nothing more; one without (written before
// the ends were) is cut by the current caps.
func (d *DDP) setBucketOrder(s string) error {
	var plan [][]int
	var order []int
	exact := strings.HasSuffix(s, "|")
	if s = strings.TrimSuffix(s, "|"); s != "" {
		for _, part := range strings.Split(s, "|") {
			var bucket []int
			for _, f := range strings.Split(part, ",") {
				i, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("metadata %s=%q is malformed", MetaBucketOrder, s)
				}
				bucket = append(bucket, i)
			}
			plan = append(plan, bucket)
			order = append(order, bucket...)
		}
	}
	if len(order) != len(d.params) || !isPermutation(order) {
		return fmt.Errorf("metadata %s lists %d parameters, not a permutation of the model's %d", MetaBucketOrder, len(order), len(d.params))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.started {
		return errors.New("LoadCheckpoint between a forward pass and Wait; load between iterations")
	}
	if exact {
		d.layout(plan)
		d.mu.caps = capsOf(plan, d.sizes())
		d.mu.tuned, d.mu.readyAt = true, nil
	} else {
		d.plan(order)
	}
	d.mu.rebuilt = true
	return nil
}

// capsOf returns caps that describe plan: its first bucket's bytes, and
// the largest of the others'.
func capsOf(plan [][]int, sizes []int64) BucketCaps {
	var c BucketCaps
	for k, ps := range plan {
		var n int64
		for _, i := range ps {
			n += sizes[i]
		}
		if k == 0 {
			c.First = n
		} else {
			c.Rest = max(c.Rest, n)
		}
	}
	c.Rest = max(c.Rest, c.First)
	return c
}

func isPermutation(order []int) bool {
	seen := make([]bool, len(order))
	for _, i := range order {
		if i < 0 || i >= len(order) || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}
