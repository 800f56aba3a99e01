package fsdp

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// CheckpointState returns this rank's pieces of the training state, under
// dcp's names for any strategy ("model.<name>", "optim.<name>.<state>"):
// each parameter's part of this rank's shard as a flat piece of it, the
// same for opt's per-parameter state (opt steps Parameters or
// ParamGroups), and the buffers whole. Give it to dcp.Save (or AsyncSave);
// dcp.LoadModule loads it into a plain module or DDP at any world size,
// and LoadCheckpoint into FSDP at any world size.
func (f *FSDP) CheckpointState(opt optim.Optimizer) (dcp.State, error) {
	st := dcp.State{}
	for _, b := range nn.NamedBuffers(f.Module) {
		st[dcp.ModelKey(b.Name)] = dcp.Whole(b.Value)
	}
	for _, u := range f.units {
		f.pieces(st, u, u.shard.Value(), func(name string) string { return dcp.ModelKey(name) })
	}
	if opt == nil {
		return st, nil
	}
	index, err := f.shardIndex(opt)
	if err != nil {
		return nil, err
	}
	sd := opt.StateDict()
	for _, u := range f.units {
		prefix := "state." + strconv.Itoa(index[u.shard]) + "."
		for k, t := range sd {
			s, ok := strings.CutPrefix(k, prefix)
			if !ok {
				continue
			}
			if t.Dim() == 0 { // a step count: every parameter of the unit has it
				for _, name := range u.names {
					st[dcp.OptimKey(name, s)] = dcp.Whole(t)
				}
				continue
			}
			f.pieces(st, u, t, func(name string) string { return dcp.OptimKey(name, s) })
		}
	}
	return st, nil
}

// LoadCheckpoint fills the shards, opt's state and the buffers from the
// checkpoint in dir, whatever strategy and world size wrote it. opt must
// be over Parameters (or ParamGroups), made before the first step.
func (f *FSDP) LoadCheckpoint(ctx context.Context, dir string, opt optim.Optimizer) error {
	st := dcp.State{}
	for _, b := range nn.NamedBuffers(f.Module) {
		st[dcp.ModelKey(b.Name)] = dcp.Whole(b.Value)
	}
	for _, u := range f.units {
		f.pieces(st, u, u.shard.Value(), func(name string) string { return dcp.ModelKey(name) })
	}
	var sd map[string]*tensor.Tensor
	if opt != nil {
		entries, err := dcp.Entries(dir)
		if err != nil {
			return err
		}
		index, err := f.shardIndex(opt)
		if err != nil {
			return err
		}
		sd = map[string]*tensor.Tensor{}
		for _, u := range f.units {
			for s, e := range dcp.StatesOf(entries, u.names[0]) {
				key := "state." + strconv.Itoa(index[u.shard]) + "." + s
				if len(e.Shape) == 0 {
					t := tensor.New(e.DType)
					st[dcp.OptimKey(u.names[0], s)] = dcp.Whole(t)
					sd[key] = t
					continue
				}
				t := tensor.New(tensor.Float32, u.shard.Value().Numel())
				f.pieces(st, u, t, func(name string) string { return dcp.OptimKey(name, s) })
				sd[key] = t
			}
		}
	}
	if err := dcp.Load(ctx, dir, st, f.group); err != nil {
		return err
	}
	if opt != nil {
		if err := opt.LoadStateDict(sd); err != nil {
			return fmt.Errorf("fsdp: load the optimizer's state from %s: %w", dir, err)
		}
	}
	return nil
}

// pieces adds, for each parameter of u that this rank's part of the flat
// vector overlaps, the overlap as a flat piece of the parameter, taken
// from t (shaped like the shard) and named by key.
func (f *FSDP) pieces(st dcp.State, u *unit, t *tensor.Tensor, key func(name string) string) {
	n := t.Numel()
	lo := 0 // where this rank's part starts in the flat vector
	if f.opt.Strategy != NoShard {
		lo = f.shards.Rank() * n
	}
	for _, pc := range u.pieces(lo, n) {
		st[key(u.names[pc.param])] = dcp.Flat(u.params[pc.param].Shape(), pc.from, t.Narrow(0, pc.at, pc.n))
	}
}

// shardIndex maps each shard to its index in opt's parameters.
func (f *FSDP) shardIndex(opt optim.Optimizer) (map[*autograd.Var]int, error) {
	index := map[*autograd.Var]int{}
	for i, p := range opt.Params() {
		index[p] = i
	}
	for _, u := range f.units {
		if _, ok := index[u.shard]; !ok {
			return nil, fmt.Errorf("fsdp: the optimizer does not step unit %s's shard: make it over Parameters or ParamGroups", u.name)
		}
	}
	return index, nil
}
