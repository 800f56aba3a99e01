package dcp

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/tensor"
)

// The names a training state has in a checkpoint, whatever the strategy
// that wrote it: "model.<name>" for each parameter and buffer of the
// module (PyTorch's names), and "optim.<name>.<state>" for each piece of
// the optimizer's state of parameter <name> (exp_avg, exp_avg_sq, step,
// momentum_buffer). So a checkpoint written by FSDP at one world size
// loads into DDP at another, or into one process (fsdp.FSDP.LoadCheckpoint
// is the other way).

// ModelKey and OptimKey are those names.
func ModelKey(name string) string        { return "model." + name }
func OptimKey(name, state string) string { return "optim." + name + "." + state }

// ModuleState returns the state of module m, held whole by this rank (one
// process, or a DDP replica), and of opt's per-parameter state, under the
// names above. The tensors are m's and opt's own: save before changing
// them, or with AsyncSave, which copies.
func ModuleState(m nn.Module, opt optim.Optimizer) (State, error) {
	st := State{}
	for k, t := range nn.StateDict(m) {
		st[ModelKey(k)] = Whole(t)
	}
	if opt == nil {
		return st, nil
	}
	names, err := nn.ParamNames(m, opt.Params())
	if err != nil {
		return nil, errorf(ErrInvalidState, err, "the optimizer's parameters")
	}
	for k, t := range opt.StateDict() {
		i, s, ok := stateKey(k)
		if !ok {
			continue
		}
		st[OptimKey(names[i], s)] = Whole(t)
	}
	return st, nil
}

// LoadModule fills m's parameters and buffers and opt's per-parameter state
// (when opt is not nil) from the checkpoint in dir, whatever wrote it. It
// is Load's collective-free counterpart: g only names the rank in errors.
func LoadModule(ctx context.Context, dir string, m nn.Module, opt optim.Optimizer, g *dist.Group) error {
	st := State{}
	for k, t := range nn.StateDict(m) {
		if !t.IsContiguous() {
			return errorf(ErrInvalidState, nil, "module tensor %s is not contiguous", k)
		}
		st[ModelKey(k)] = Whole(t)
	}
	var sd map[string]*tensor.Tensor
	if opt != nil {
		entries, err := Entries(dir)
		if err != nil {
			return err
		}
		names, err := nn.ParamNames(m, opt.Params())
		if err != nil {
			return errorf(ErrInvalidState, err, "the optimizer's parameters")
		}
		sd = map[string]*tensor.Tensor{}
		for i, name := range names {
			for s, e := range StatesOf(entries, name) {
				t := tensor.New(e.DType, e.Shape...)
				st[OptimKey(name, s)] = Whole(t)
				sd["state."+strconv.Itoa(i)+"."+s] = t
			}
		}
	}
	if err := Load(ctx, dir, st, g); err != nil {
		return err
	}
	if opt != nil {
		if err := opt.LoadStateDict(sd); err != nil {
			return fmt.Errorf("dcp: load the optimizer's state from %s: %w", dir, err)
		}
	}
	return nil
}

// StatesOf returns the optimizer states that entries hold for parameter
// name, by state name.
func StatesOf(entries map[string]Entry, name string) map[string]Entry {
	out := map[string]Entry{}
	prefix := "optim." + name + "."
	for k, e := range entries {
		if s, ok := strings.CutPrefix(k, prefix); ok && !strings.Contains(s, ".") {
			out[s] = e
		}
	}
	return out
}

// stateKey splits an optimizer state-dict key "state.I.name".
func stateKey(k string) (int, string, bool) {
	rest, ok := strings.CutPrefix(k, "state.")
	if !ok {
		return 0, "", false
	}
	idx, s, ok := strings.Cut(rest, ".")
	i, err := strconv.Atoi(idx)
	return i, s, ok && err == nil
}
