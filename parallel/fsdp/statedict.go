package fsdp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// Full state dicts gathered on one rank, and the optimizer's state in the
// same unflattened form: PyTorch's FULL_STATE_DICT with rank0_only, and
// FSDP.full_optim_state_dict / shard_full_optim_state_dict. The sharded
// forms are CheckpointState and LoadCheckpoint.

// FullStateDictOn returns, on rank root of the group, the module's state
// dict with every parameter whole under the module's own names (as
// FullStateDict: loadable by the plain module with nn.LoadStateDict, and
// by PyTorch), and nil on the other ranks. It is a collective. Units are
// gathered one at a time, in float32 whatever MixedPrecision says, and
// only root keeps them.
func (f *FSDP) FullStateDictOn(ctx context.Context, root int) (map[string]*tensor.Tensor, error) {
	if root < 0 || root >= f.group.Size() {
		return nil, fmt.Errorf("fsdp: full state dict on rank %d of a group of %d", root, f.group.Size())
	}
	if err := f.takeErr(); err != nil {
		return nil, err
	}
	keep := f.group.Rank() == root
	var sd map[string]*tensor.Tensor
	if keep {
		sd = map[string]*tensor.Tensor{}
		// Buffers and frozen parameters, which no unit holds, are the
		// same on every rank.
		for k, v := range nn.StateDict(f.Module) {
			sd[k] = v.Clone()
		}
	}
	for _, u := range f.units {
		full, err := f.gatherFlat(ctx, u, u.shard.Value())
		if err != nil {
			return nil, fmt.Errorf("fsdp: full state dict: gather unit %s: %w", u.name, err)
		}
		if keep {
			for k, p := range u.params {
				sd[u.names[k]] = full.Narrow(0, u.offsets[k], p.Value().Numel()).Reshape(p.Shape()...).Clone()
			}
		}
	}
	return sd, nil
}

// LoadFullStateDict sets the module's parameters (the shards) and buffers
// from sd, a full state dict under the module's names (FullStateDict's, a
// plain module's nn.StateDict, PyTorch's); every key must be there and
// every shape match. It is a collective; every rank passes the same sd.
func (f *FSDP) LoadFullStateDict(ctx context.Context, sd map[string]*tensor.Tensor) error {
	return f.SummonFullParams(ctx, func() error {
		if err := nn.LoadStateDict(f.Module, sd, true); err != nil {
			return fmt.Errorf("fsdp: load full state dict: %w", err)
		}
		return nil
	})
}

// FullOptimStateDict returns, on rank root, the per-parameter state of
// opt (which steps Parameters or ParamGroups) with every tensor whole and
// unflattened, keyed "<parameter name>.<state>" by the module's parameter
// names ("h.0.attn.in_proj_weight.exp_avg"; a step count under each
// parameter of its unit), and nil on the other ranks: PyTorch's
// FSDP.full_optim_state_dict. Hyper-parameters are left out. It is a
// collective. OptimStateByIndex turns it into the state dict of an
// optimizer over the plain module; LoadFullOptimStateDict loads it into
// FSDP at any world size and strategy.
func (f *FSDP) FullOptimStateDict(ctx context.Context, opt optim.Optimizer, root int) (map[string]*tensor.Tensor, error) {
	if root < 0 || root >= f.group.Size() {
		return nil, fmt.Errorf("fsdp: full optimizer state dict on rank %d of a group of %d", root, f.group.Size())
	}
	if err := f.takeErr(); err != nil {
		return nil, err
	}
	index, err := f.shardIndex(opt)
	if err != nil {
		return nil, err
	}
	keep := f.group.Rank() == root
	var out map[string]*tensor.Tensor
	if keep {
		out = map[string]*tensor.Tensor{}
	}
	sd := opt.StateDict()
	for _, u := range f.units {
		prefix := "state." + strconv.Itoa(index[u.shard]) + "."
		var states []string
		for k := range sd {
			if s, ok := strings.CutPrefix(k, prefix); ok {
				states = append(states, s)
			}
		}
		slices.Sort(states) // every rank gathers in the same order
		for _, s := range states {
			t := sd[prefix+s]
			if t.Dim() == 0 {
				if keep {
					for _, name := range u.names {
						out[name+"."+s] = t.Clone()
					}
				}
				continue
			}
			if t.DType() != tensor.Float32 || t.Numel() != u.shard.Value().Numel() {
				return nil, fmt.Errorf("fsdp: full optimizer state dict: state %s of unit %s is %v%v, not shaped as its shard (%d float32)", s, u.name, t.DType(), t.Shape(), u.shard.Value().Numel())
			}
			full, err := f.gatherFlat(ctx, u, t)
			if err != nil {
				return nil, fmt.Errorf("fsdp: full optimizer state dict: gather state %s of unit %s: %w", s, u.name, err)
			}
			if keep {
				for k, p := range u.params {
					out[u.names[k]+"."+s] = full.Narrow(0, u.offsets[k], p.Value().Numel()).Reshape(p.Shape()...).Clone()
				}
			}
		}
	}
	return out, nil
}

// LoadFullOptimStateDict gives opt (over Parameters or ParamGroups, made
// before its first step) this rank's part of full, a FullOptimStateDict
// written at any world size and strategy (or OptimStateByName of a plain
// optimizer's): PyTorch's shard_full_optim_state_dict. Every rank passes
// the same full; nothing is communicated. Hyper-parameters keep opt's
// values.
func (f *FSDP) LoadFullOptimStateDict(full map[string]*tensor.Tensor, opt optim.Optimizer) error {
	index, err := f.shardIndex(opt)
	if err != nil {
		return err
	}
	sd := map[string]*tensor.Tensor{}
	for _, u := range f.units {
		n := u.shard.Value().Numel()
		lo := 0 // where this rank's shard starts in the flat vector
		if f.opt.Strategy != NoShard {
			lo = f.shards.Rank() * n
		}
		prefix := "state." + strconv.Itoa(index[u.shard]) + "."
		for s, t0 := range statesOf(full, u.names[0]) {
			if t0.Dim() == 0 {
				sd[prefix+s] = t0.Clone()
				continue
			}
			shard := tensor.New(tensor.Float32, n)
			for k, p := range u.params {
				if t, ok := full[u.names[k]+"."+s]; !ok || t.Numel() != p.Value().Numel() {
					return fmt.Errorf("fsdp: load full optimizer state dict: state %s of parameter %s is missing or not of its %d elements", s, u.names[k], p.Value().Numel())
				}
			}
			for _, pc := range u.pieces(lo, n) {
				t := full[u.names[pc.param]+"."+s]
				shard.Narrow(0, pc.at, pc.n).Copy(t.Contiguous().Reshape(-1).Narrow(0, pc.from, pc.n).To(tensor.Float32))
			}
			sd[prefix+s] = shard
		}
	}
	if err := opt.LoadStateDict(sd); err != nil {
		return fmt.Errorf("fsdp: load full optimizer state dict: %w", err)
	}
	return nil
}

// OptimStateByIndex turns full, an optimizer state keyed by parameter
// names (FullOptimStateDict's), into the state dict of opt, an optimizer
// over module m's parameters in any order and groups ("state.<i>.<state>",
// i the parameter's index in opt.Params()), for opt.LoadStateDict:
// PyTorch's FSDP.rekey_optim_state_dict to parameter ids. States of
// parameters opt does not step are an error.
func OptimStateByIndex(full map[string]*tensor.Tensor, m nn.Module, opt optim.Optimizer) (map[string]*tensor.Tensor, error) {
	names, err := nn.ParamNames(m, opt.Params())
	if err != nil {
		return nil, fmt.Errorf("fsdp: the optimizer's parameters: %w", err)
	}
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	out := map[string]*tensor.Tensor{}
	for _, k := range slices.Sorted(maps.Keys(full)) {
		dot := strings.LastIndexByte(k, '.')
		i, ok := index[k[:max(dot, 0)]]
		if dot < 0 || !ok {
			return nil, fmt.Errorf("fsdp: optimizer state %q is for no parameter the optimizer steps", k)
		}
		out["state."+strconv.Itoa(i)+"."+k[dot+1:]] = full[k]
	}
	return out, nil
}

// OptimStateByName is OptimStateByIndex's inverse: the per-parameter
// state of opt, an optimizer over module m's parameters, keyed by the
// parameters' names, for LoadFullOptimStateDict.
func OptimStateByName(m nn.Module, opt optim.Optimizer) (map[string]*tensor.Tensor, error) {
	names, err := nn.ParamNames(m, opt.Params())
	if err != nil {
		return nil, fmt.Errorf("fsdp: the optimizer's parameters: %w", err)
	}
	out := map[string]*tensor.Tensor{}
	for k, t := range opt.StateDict() {
		rest, ok := strings.CutPrefix(k, "state.")
		if !ok {
			continue
		}
		idx, s, ok := strings.Cut(rest, ".")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil || i < 0 || i >= len(names) {
			return nil, fmt.Errorf("fsdp: optimizer state %q: bad key", k)
		}
		out[names[i]+"."+s] = t
	}
	return out, nil
}

// gatherFlat all-gathers t, shaped as u's shard, into u's whole flat
// vector (padded) across the shard group; under NoShard t is the whole.
func (f *FSDP) gatherFlat(ctx context.Context, u *unit, t *tensor.Tensor) (*tensor.Tensor, error) {
	if f.opt.Strategy == NoShard {
		return t, nil
	}
	if err := f.group.Err(); err != nil {
		return nil, err
	}
	full := tensor.New(tensor.Float32, u.padded)
	if err := f.wait(ctx, f.shards.AllGatherIntoTensorAsync(full, t.Contiguous())); err != nil {
		return nil, err
	}
	return full, nil
}

// statesOf returns full's states of parameter name, by state name.
func statesOf(full map[string]*tensor.Tensor, name string) map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	for k, t := range full {
		if s, ok := strings.CutPrefix(k, name+"."); ok && !strings.Contains(s, ".") {
			out[s] = t
		}
	}
	return out
}
