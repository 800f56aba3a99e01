package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/godist/godist/checkpoint"
	"github.com/godist/godist/checkpoint/dcp"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/examples/progress"
	"github.com/godist/godist/models"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/optim"
	"github.com/godist/godist/parallel/ddp"
	"github.com/godist/godist/tensor"
)

// history is what the plot shows.
type history struct {
	Loss []float64    // training loss at every step (rank 0's batch)
	Val  [][2]float64 // (step, validation bits per byte)
}

// save writes the checkpoint on rank 0 (the model under its PyTorch
// names, the optimizer, the step and the history) and the plot, then a
// barrier, so that no rank reads a half-written file.
func save(ctx context.Context, g *dist.Group, c config, rep *replica, opt optim.Optimizer, step int, h history) error {
	if c.ckptDir != "" {
		if err := saveDistributed(ctx, g, c.ckptDir, rep, opt, step, h); err != nil {
			return fmt.Errorf("distributed checkpoint: %w", err)
		}
	}
	if c.ckpt != "" {
		if err := saveFile(ctx, g, c, rep, opt, step, h); err != nil {
			return err
		}
	}
	if g.Rank() == 0 && c.plotPath != "" {
		if err := h.plot(c.plotPath); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return g.Barrier(ctx)
}

// saveFile writes the single-file checkpoint on rank 0 (every rank takes
// part in gathering what it holds).
func saveFile(ctx context.Context, g *dist.Group, c config, rep *replica, opt optim.Optimizer, step int, h history) error {
	weights, err := rep.stateDict(ctx) // a collective under FSDP
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := consolidate(ctx, opt); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if g.Rank() == 0 {
		ts := map[string]*tensor.Tensor{}
		for k, v := range weights {
			ts[k] = v
		}
		if rep.fsdp == nil {
			// FSDP's optimizer state is sharded, and not in this file.
			for k, v := range opt.StateDict() {
				ts["optim."+k] = v
			}
		}
		hs := h.tensors(step)
		ts["history.loss"], ts["history.val"] = hs["history.loss"], hs["history.val"]
		for k, v := range rep.scaler.StateDict() { // none unless --autocast fp16
			ts["scaler."+k] = v
		}
		cfg, _ := json.Marshal(c)
		meta := map[string]string{"step": strconv.Itoa(step), "config": string(cfg)}
		if rep.ddp != nil {
			// The order the ranks' gradients are summed in: a resumed
			// run needs it to match, bit for bit, the one that went on.
			meta[ddp.MetaBucketOrder] = rep.ddp.BucketOrder()
		}
		if err := checkpoint.SaveFile(c.ckpt, ts, meta); err != nil {
			return err
		}
	}
	return nil
}

// saveDistributed writes a distributed checkpoint: every rank its pieces
// of the model and the optimizer's state (dcp's names, whatever the
// strategy), the step and the history whole.
func saveDistributed(ctx context.Context, g *dist.Group, dir string, rep *replica, opt optim.Optimizer, step int, h history) error {
	var st dcp.State
	var err error
	if rep.fsdp != nil {
		st, err = rep.fsdp.CheckpointState(opt)
	} else if err = consolidate(ctx, opt); err == nil {
		// ZeRO's state is on rank 0 now, whose file holds it.
		st, err = dcp.ModuleState(rep.gpt, opt)
	}
	if err != nil {
		return err
	}
	for k, t := range h.tensors(step) {
		st[k] = dcp.Whole(t)
	}
	for k, t := range rep.scaler.StateDict() { // none unless --autocast fp16
		st["scaler."+k] = dcp.Whole(t)
	}
	return dcp.Save(ctx, dir, st, g)
}

// loadDistributed restores the model, the optimizer, the step and the
// history from a distributed checkpoint written under any strategy and
// world size.
func loadDistributed(ctx context.Context, g *dist.Group, dir string, m *models.GPT, rep *replica, opt optim.Optimizer) (int, history, error) {
	var err error
	if rep.fsdp != nil {
		err = rep.fsdp.LoadCheckpoint(ctx, dir, opt)
	} else {
		err = dcp.LoadModule(ctx, dir, m, opt, g)
	}
	if err != nil {
		return 0, history{}, err
	}
	entries, err := dcp.Entries(dir)
	if err != nil {
		return 0, history{}, err
	}
	st, ts := dcp.State{}, map[string]*tensor.Tensor{}
	for _, k := range []string{"meta.step", "history.loss", "history.val"} {
		e, ok := entries[k]
		if !ok {
			return 0, history{}, fmt.Errorf("%s holds no %s: not a tinygpt checkpoint", dir, k)
		}
		ts[k] = tensor.New(e.DType, e.Shape...)
		st[k] = dcp.Whole(ts[k])
	}
	scaler := map[string]*tensor.Tensor{}
	if rep.scaler.Enabled() {
		for k, e := range entries {
			if name, ok := strings.CutPrefix(k, "scaler."); ok {
				scaler[name] = tensor.New(e.DType, e.Shape...)
				st[k] = dcp.Whole(scaler[name])
			}
		}
	}
	if err := dcp.Load(ctx, dir, st, g); err != nil {
		return 0, history{}, err
	}
	if err := loadScaler(rep.scaler, scaler); err != nil {
		return 0, history{}, err
	}
	return int(ts["meta.step"].Item()), historyOf(ts), nil
}

// loadScaler restores the GradScaler of --autocast fp16 from sd, its
// state in a checkpoint. A checkpoint of a run without it (float32,
// bfloat16) has none: the scaler then starts afresh, as a run that turns
// float16 on at a resume must.
func loadScaler(s *optim.GradScaler, sd map[string]*tensor.Tensor) error {
	if !s.Enabled() || len(sd) == 0 {
		return nil
	}
	return s.LoadStateDict(sd)
}

// tensors is h as checkpoint tensors, with the step.
func (h history) tensors(step int) map[string]*tensor.Tensor {
	val := make([]float64, 0, 2*len(h.Val))
	for _, v := range h.Val {
		val = append(val, v[0], v[1])
	}
	return map[string]*tensor.Tensor{
		"meta.step":    tensor.FromInt64([]int64{int64(step)}).Reshape(),
		"history.loss": tensor.FromFloat64(append([]float64{}, h.Loss...)),
		"history.val":  tensor.FromFloat64(val),
	}
}

// historyOf reads a history back from its tensors.
func historyOf(ts map[string]*tensor.Tensor) history {
	var h history
	if t := ts["history.loss"]; t != nil {
		h.Loss = t.Values()
	}
	if t := ts["history.val"]; t != nil {
		v := t.Values()
		for i := 0; i+1 < len(v); i += 2 {
			h.Val = append(h.Val, [2]float64{v[i], v[i+1]})
		}
	}
	return h
}

// load restores the model, the optimizer and the history from a
// checkpoint and returns its step. A tensor whose shape differs from the
// model's (a checkpoint of another configuration) is an error naming it
// and both shapes.
func load(path string, m *models.GPT, opt optim.Optimizer, scaler *optim.GradScaler) (int, history, string, error) {
	ts, meta, err := checkpoint.LoadFile(path)
	if err != nil {
		return 0, history{}, "", err
	}
	want := nn.StateDict(m)
	ms, os, ss := map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}
	for _, k := range slices.Sorted(maps.Keys(ts)) { // the same tensor named every time
		v := ts[k]
		switch {
		case strings.HasPrefix(k, "optim."):
			os[strings.TrimPrefix(k, "optim.")] = v
		case strings.HasPrefix(k, "scaler."):
			ss[strings.TrimPrefix(k, "scaler.")] = v
		case strings.HasPrefix(k, "history."):
		default:
			if w, ok := want[k]; ok && !tensor.SameShape(w, v) {
				return 0, history{}, "", fmt.Errorf("tensor %s has shape %v in the checkpoint but %v in the model: the checkpoint is of another configuration (%s); pass the flags it was trained with", k, v.Shape(), w.Shape(), meta["config"])
			}
			ms[k] = v
		}
	}
	if err := nn.LoadStateDict(m, ms, true); err != nil {
		return 0, history{}, "", err
	}
	if err := opt.LoadStateDict(os); err != nil {
		return 0, history{}, "", err
	}
	if err := loadScaler(scaler, ss); err != nil {
		return 0, history{}, "", err
	}
	step, err := strconv.Atoi(meta["step"])
	if err != nil {
		return 0, history{}, "", fmt.Errorf("checkpoint %s has no step", path)
	}
	return step, historyOf(ts), meta[ddp.MetaBucketOrder], nil
}

func (h history) plot(path string) error {
	bits := make([]float64, len(h.Loss))
	for i, v := range h.Loss {
		bits[i] = v / math.Ln2
	}
	return progress.Curves{Title: "tiny GPT on the Go source tree", YLabel: "bits per byte",
		StepLabel: "training (rank 0's batch)", Steps: bits, EvalLabel: "validation", Evals: h.Val}.Save(path, 5*vg.Inch)
}
