// Package pipeline trains a model cut into stages on different ranks,
// running micro-batches through the stages at the same time, as PyTorch's
// torch.distributed.pipelining: GPipe, 1F1B, interleaved 1F1B and the
// zero-bubble ZB-H1 schedule (package schedule holds them as pure
// per-rank programs; this package runs them).
//
// Each rank builds the whole model's structure (or only its part), gives
// New the stages the schedule places on it, and calls Step once per
// training step with the step's micro-batches: the first stage's rank
// passes the inputs, the last stage's rank the targets. Step runs the
// rank's program: forwards and backwards of its stages, activations sent
// to the next stage's rank and gradients to the previous one with
// non-blocking point-to-point operations on the pipeline's group. When it
// returns, every parameter of the rank's stages holds the gradient of the
// mean of the micro-batches' losses, accumulated in micro-batch order (so
// the result is the same, bit for bit, as running the micro-batches
// through the unsplit model one after another); the caller then steps its
// optimizer, as with DDP.
//
// Data parallelism composes on a device mesh (dist.NewMesh): the pipeline
// runs in the mesh's pipeline dimension and Options.DataParallel names the
// other, across which Step averages the gradients. A parameter that
// appears on two stages (a GPT's token embedding, tied to its output head)
// is declared in Options.Tied; Step sums its gradient over the stages that
// hold it.
//
// Shapes are agreed per step: a stage's rank tells the next stage's rank
// the shape and dtype of its output before the first micro-batch's
// activation, so micro-batches may change shape from step to step (all
// micro-batches of one step have one shape).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/dist"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/parallel/pipeline/schedule"
	"github.com/godist/godist/tensor"
)

// Stage is one stage of the model held by this rank: the stage's index in
// the model (0 is the first) and the layer that computes it.
type Stage struct {
	Index  int
	Module nn.Layer
}

// Tie is a parameter that several stages hold, each its own copy (with
// equal values): Group is the group of the ranks holding a copy, over
// which Step sums its gradient, so every copy gets the gradient of all
// uses and, stepped alike, keeps the same value.
type Tie struct {
	Param *autograd.Var
	Group *dist.Group
}

// Options configure a pipeline.
type Options struct {
	// Loss computes a micro-batch's loss from the last stage's output and
	// the micro-batch's target; required on the last stage's rank. Step
	// backpropagates the mean over the micro-batches.
	Loss func(out *autograd.Var, target *tensor.Tensor) *autograd.Var
	// DataParallel, if set, is the group of the replicas of this rank's
	// stages (a mesh's data-parallel dimension): Step averages the
	// gradients across it after the backward passes.
	DataParallel *dist.Group
	// Tied lists the parameters shared between stages.
	Tied []Tie
	// Watch lists groups whose failure ends a step at once (the mesh's
	// parent group): a rank waiting on a live neighbour whose own
	// neighbour died learns of it there.
	Watch []*dist.Group
}

// Pipeline runs one rank's part of a pipeline schedule.
type Pipeline struct {
	g      *dist.Group
	sched  *schedule.Schedule
	prog   schedule.Program
	opt    Options
	stages map[int]*stage
	last   int // the model's last stage

	stats Stats
}

type stage struct {
	Stage
	params []*autograd.Var
}

// Stats describe the last step.
type Stats struct {
	// Loss is the mean of the micro-batches' losses, on the rank of the
	// last stage (zero elsewhere).
	Loss float64
	// PeakActivationBytes is the largest number of bytes that the
	// autograd graphs of this rank's micro-batches held at once: the
	// values of every operation between a micro-batch's forward and the
	// end of its backward (its weight pass, for split schedules).
	PeakActivationBytes int64
	// PeakLive is the largest number of micro-batches (per stage) whose
	// graphs were held at once.
	PeakLive int
}

// New returns the pipeline of this rank: g is the pipeline group (rank r
// of g runs sched.Programs[r]) and stages are the stages sched places on
// this rank, in any order.
func New(g *dist.Group, sched *schedule.Schedule, stages []Stage, opt Options) (*Pipeline, error) {
	if err := sched.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: schedule %s: %w", sched.Name, err)
	}
	if g.Size() != sched.Ranks {
		return nil, fmt.Errorf("pipeline: schedule %s is for %d ranks, the group has %d", sched.Name, sched.Ranks, g.Size())
	}
	p := &Pipeline{g: g, sched: sched, prog: sched.Programs[g.Rank()], opt: opt, stages: map[int]*stage{}, last: sched.Stages - 1}
	want := sched.StagesOf(g.Rank())
	for _, s := range stages {
		if !slices.Contains(want, s.Index) {
			return nil, fmt.Errorf("pipeline: rank %d was given stage %d; schedule %s places stages %v on it", g.Rank(), s.Index, sched.Name, want)
		}
		if p.stages[s.Index] != nil {
			return nil, fmt.Errorf("pipeline: stage %d given twice", s.Index)
		}
		p.stages[s.Index] = &stage{Stage: s, params: nn.Parameters(s.Module)}
	}
	for _, s := range want {
		if p.stages[s] == nil {
			return nil, fmt.Errorf("pipeline: rank %d holds stage %d in schedule %s but was not given it", g.Rank(), s, sched.Name)
		}
	}
	if p.stages[p.last] != nil && opt.Loss == nil {
		return nil, fmt.Errorf("pipeline: rank %d holds the last stage: Options.Loss is required", g.Rank())
	}
	return p, nil
}

// Parameters returns the parameters of this rank's stages, in stage order.
func (p *Pipeline) Parameters() []*autograd.Var {
	var out []*autograd.Var
	for _, s := range p.sched.StagesOf(p.g.Rank()) {
		for _, q := range p.stages[s].params {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
	}
	return out
}

// HasFirst and HasLast report whether this rank holds the model's first
// or last stage (and so takes the inputs or the targets in Step).
func (p *Pipeline) HasFirst() bool { return p.stages[0] != nil }
func (p *Pipeline) HasLast() bool  { return p.stages[p.last] != nil }

// Stats returns the statistics of the last step.
func (p *Pipeline) Stats() Stats { return p.stats }

// StepError is the failure of one action of a step.
type StepError struct {
	Rank      int // this rank in the pipeline group
	WorldRank int // and in the job
	Action    schedule.Action
	Err       error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("pipeline: rank %d (pipeline rank %d), %s: %v", e.WorldRank, e.Rank, describe(e.Action), e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

func describe(a schedule.Action) string {
	switch a.Kind {
	case schedule.Forward:
		return fmt.Sprintf("forward of stage %d on micro-batch %d", a.Stage, a.Micro)
	case schedule.Backward, schedule.BackwardInput:
		return fmt.Sprintf("backward of stage %d on micro-batch %d", a.Stage, a.Micro)
	case schedule.BackwardWeight:
		return fmt.Sprintf("weight gradients of stage %d on micro-batch %d", a.Stage, a.Micro)
	case schedule.SendAct, schedule.RecvAct:
		return fmt.Sprintf("%v of stage %d's micro-batch %d with pipeline rank %d", a.Kind, a.Stage, a.Micro, a.Peer)
	}
	return fmt.Sprintf("%v of stage %d's micro-batch %d with pipeline rank %d", a.Kind, a.Stage, a.Micro, a.Peer)
}

// micro is one (stage, micro-batch)'s state within a step.
type micro struct {
	in, out  *autograd.Var // the stage's input leaf (nil on the first stage) and output (the scaled loss on the last)
	recvAct  *dist.Work
	act      *tensor.Tensor // the received activation
	recvGrad *dist.Work
	grad     *tensor.Tensor // the gradient of out, received or handed over
	weights  *autograd.WeightPass
	bytes    int64
	freed    bool
}

// Tags: each (kind, stage, micro-batch) of a step has its own tag, and a
// stage's shape message its own, so no two transfers between a pair of
// ranks can be confused.
func (p *Pipeline) tag(kind, stage, micro int) int {
	return ((kind*p.sched.Stages)+stage)*(p.sched.Micros+1) + micro
}

const (
	tagAct = iota
	tagGrad
	tagMeta
)

// Step runs one training step on the micro-batches: inputs on the first
// stage's rank, targets on the last stage's (nil elsewhere), each
// sched.Micros long. Gradients are accumulated into the parameters (zero
// them before, as with any backward pass); Stats then holds the mean loss.
func (p *Pipeline) Step(ctx context.Context, inputs, targets []*tensor.Tensor) error {
	st, err := p.run(ctx, false, inputs, targets)
	if err == nil {
		p.stats = Stats{Loss: st.loss / float64(p.sched.Micros), PeakActivationBytes: st.peakBytes, PeakLive: st.peakLive}
	}
	return err
}

// Eval runs the micro-batches through the stages' forward passes only,
// as Step's schedule orders them without its backward actions, and
// returns on the last stage's rank the mean of their losses (zero
// elsewhere). No gradients are computed and no graph is kept past its
// micro-batch. Every rank of the pipeline must call it, like Step.
func (p *Pipeline) Eval(ctx context.Context, inputs, targets []*tensor.Tensor) (float64, error) {
	st, err := p.run(ctx, true, inputs, targets)
	if err != nil || !p.HasLast() {
		return 0, err
	}
	return st.loss / float64(p.sched.Micros), nil
}

// run runs this rank's program once (its forward actions only for eval)
// and, for a training step, reduces the gradients. It watches the
// groups of Options.Watch, and on any failure aborts the pipeline's
// groups with the root cause.
func (p *Pipeline) run(ctx context.Context, eval bool, inputs, targets []*tensor.Tensor) (*step, error) {
	m := p.sched.Micros
	if p.HasFirst() && len(inputs) != m {
		return nil, fmt.Errorf("pipeline: rank %d holds the first stage: want %d input micro-batches, got %d", p.g.Rank(), m, len(inputs))
	}
	if p.HasLast() && len(targets) != m {
		return nil, fmt.Errorf("pipeline: rank %d holds the last stage: want %d target micro-batches, got %d", p.g.Rank(), m, len(targets))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, g := range p.opt.Watch {
		go func() {
			select {
			case <-g.Failed():
				// Tell the pipeline and data-parallel peers the root
				// cause before this rank's calls stop (a peer waiting on
				// this rank would otherwise hear only that it left).
				cause := g.Err()
				p.abort(cause)
				cancel(cause)
			case <-ctx.Done():
			}
		}()
	}
	st := &step{p: p, eval: eval, ctx: ctx, inputs: inputs, targets: targets, mbs: map[[2]int]*micro{}}
	err := st.run()
	if err == nil && !eval {
		err = p.reduceGrads(ctx)
	}
	if err != nil {
		// The peers are mid-step and cannot finish it: tell them why
		// (they would otherwise wait on this rank, or hear only that it
		// left), and fail the pipeline's groups for good.
		err = explain(ctx, err)
		p.abort(err)
		return nil, err
	}
	return st, nil
}

func (p *Pipeline) abort(err error) {
	p.g.Abort(err)
	if p.opt.DataParallel != nil {
		p.opt.DataParallel.Abort(err)
	}
}

// explain replaces, in err, the cancellation that a watched group's
// failure caused by that failure: the rank that died, not "canceled".
func explain(ctx context.Context, err error) error {
	c := context.Cause(ctx)
	if err == nil || c == nil || errors.Is(c, context.Canceled) || !errors.Is(err, context.Canceled) {
		return err
	}
	var se *StepError
	if errors.As(err, &se) {
		se.Err = c
		return err
	}
	return fmt.Errorf("%v: interrupted because %w", err, c)
}

type step struct {
	p               *Pipeline
	eval            bool // forwards only, no graphs kept (Eval)
	ctx             context.Context
	inputs, targets []*tensor.Tensor
	mbs             map[[2]int]*micro
	sends           []*dist.Work
	shapes          map[int]meta // per stage: the shape of its input (received) this step
	loss            float64
	liveBytes       int64
	peakBytes       int64
	live, peakLive  int
}

func (st *step) mb(stage, i int) *micro {
	k := [2]int{stage, i}
	if st.mbs[k] == nil {
		st.mbs[k] = &micro{}
	}
	return st.mbs[k]
}

func (st *step) run() error {
	p := st.p
	st.shapes = map[int]meta{}
	for _, a := range p.prog {
		if st.eval && a.Kind != schedule.Forward && a.Kind != schedule.SendAct && a.Kind != schedule.RecvAct {
			// Dropping the backward actions only removes waits: the
			// forwards never depend on them.
			continue
		}
		if err := st.do(a); err != nil {
			st.drain()
			return &StepError{Rank: p.g.Rank(), WorldRank: p.g.WorldRank(), Action: a, Err: err}
		}
	}
	for _, w := range st.sends {
		if err := w.Wait(st.ctx); err != nil {
			return &StepError{Rank: p.g.Rank(), WorldRank: p.g.WorldRank(), Action: schedule.Action{Kind: schedule.SendAct, Peer: -1}, Err: err}
		}
	}
	return nil
}

// drain waits briefly for the sends already started, so that their
// tensors are not reused under them after a failed step.
func (st *step) drain() {
	for _, w := range st.sends {
		select {
		case <-w.Done():
		case <-st.ctx.Done():
			return
		}
	}
}

func (st *step) do(a schedule.Action) error {
	p := st.p
	s := p.stages[a.Stage]
	if s == nil {
		return fmt.Errorf("the schedule names stage %d, which this rank does not hold", a.Stage)
	}
	mb := st.mb(a.Stage, a.Micro)
	switch a.Kind {
	case schedule.RecvAct:
		md, ok := st.shapes[a.Stage]
		if !ok {
			var err error
			if md, err = st.recvMeta(a); err != nil {
				return err
			}
			st.shapes[a.Stage] = md
		}
		mb.act = tensor.New(md.dtype, md.shape...)
		mb.recvAct = p.g.IRecv(mb.act, a.Peer, p.tag(tagAct, a.Stage, a.Micro))
	case schedule.SendAct:
		if mb.out == nil {
			return errors.New("the schedule sends an activation not computed yet")
		}
		out := mb.out.Value()
		if a.Micro == 0 {
			if err := st.sendMeta(a, out); err != nil {
				return err
			}
		}
		st.sends = append(st.sends, p.g.ISend(out, a.Peer, p.tag(tagAct, a.Stage+1, a.Micro)))
	case schedule.Forward:
		return st.forward(s, a, mb)
	case schedule.RecvGrad:
		if mb.out == nil {
			return errors.New("the schedule receives a gradient before its forward")
		}
		mb.grad = tensor.New(mb.out.DType(), mb.out.Shape()...)
		mb.recvGrad = p.g.IRecv(mb.grad, a.Peer, p.tag(tagGrad, a.Stage, a.Micro))
	case schedule.Backward, schedule.BackwardInput:
		return st.backward(s, a, mb)
	case schedule.BackwardWeight:
		if mb.weights == nil {
			return errors.New("the schedule runs a weight pass before its backward")
		}
		err := mb.weights.Run()
		mb.weights = nil
		st.free(mb)
		return err
	case schedule.SendGrad:
		if mb.in == nil || mb.in.Grad() == nil {
			return errors.New("the schedule sends an input gradient not computed yet")
		}
		st.sends = append(st.sends, p.g.ISend(mb.in.Grad(), a.Peer, p.tag(tagGrad, a.Stage-1, a.Micro)))
	default:
		return fmt.Errorf("unknown action kind %v", a.Kind)
	}
	return nil
}

func (st *step) forward(s *stage, a schedule.Action, mb *micro) error {
	p := st.p
	var x *autograd.Var
	switch {
	case a.Stage == 0:
		x = autograd.Const(st.inputs[a.Micro])
	case mb.recvAct != nil:
		if err := mb.recvAct.Wait(st.ctx); err != nil {
			return err
		}
		mb.in = autograd.NewVar(mb.act, !st.eval)
		x = mb.in
	default:
		// The previous stage is on this rank: its output is handed over
		// as if it had been sent.
		prev := st.mbs[[2]int{a.Stage - 1, a.Micro}]
		if prev == nil || prev.out == nil || p.stages[a.Stage-1] == nil {
			return errors.New("the schedule runs a forward before its input is there")
		}
		mb.in = autograd.NewVar(prev.out.Value(), !st.eval)
		x = mb.in
	}
	out := nn.Call(s.Module, x)
	if a.Stage == p.last {
		loss := p.opt.Loss(out, st.targets[a.Micro])
		if err := loss.Err(); err != nil {
			return err
		}
		st.loss += loss.Value().At()
		out = autograd.MulScalar(loss, 1/float64(p.sched.Micros))
	}
	if err := out.Err(); err != nil {
		return err
	}
	if st.eval {
		mb.out = autograd.Const(out.Value()) // the graph goes at once
		return nil
	}
	mb.out = out
	mb.bytes = autograd.GraphBytes(out)
	st.liveBytes += mb.bytes
	st.live++
	st.peakBytes = max(st.peakBytes, st.liveBytes)
	st.peakLive = max(st.peakLive, st.live)
	return nil
}

func (st *step) backward(s *stage, a schedule.Action, mb *micro) error {
	p := st.p
	if mb.out == nil {
		return errors.New("the schedule runs a backward before its forward")
	}
	var grad *tensor.Tensor
	switch {
	case a.Stage == p.last:
	case mb.recvGrad != nil:
		if err := mb.recvGrad.Wait(st.ctx); err != nil {
			return err
		}
		grad = mb.grad
	default:
		next := st.mbs[[2]int{a.Stage + 1, a.Micro}]
		if next == nil || next.in == nil || next.in.Grad() == nil {
			return errors.New("the schedule runs a backward before its output's gradient is there")
		}
		grad = next.in.Grad()
	}
	if a.Kind == schedule.BackwardInput {
		w, err := mb.out.BackwardSplit(grad, s.params)
		mb.weights = w
		return err
	}
	err := mb.out.Backward(grad)
	st.free(mb)
	return err
}

// free counts a micro-batch's graph as released (its backward, or weight
// pass, is done) and drops what the step no longer needs of it.
func (st *step) free(mb *micro) {
	if mb.freed {
		return
	}
	mb.freed = true
	st.liveBytes -= mb.bytes
	st.live--
	mb.out = autograd.Const(mb.out.Value()) // the graph goes; the value may still be sent
	mb.act = nil
}

// meta is the shape and dtype of a stage's input, sent once per step.
type meta struct {
	dtype tensor.DType
	shape []int
}

const maxMetaDims = 8

func (st *step) sendMeta(a schedule.Action, out *tensor.Tensor) error {
	if out.Dim() > maxMetaDims {
		return fmt.Errorf("stage %d's output has %d dimensions; at most %d can be sent", a.Stage, out.Dim(), maxMetaDims)
	}
	v := make([]int64, 2+maxMetaDims)
	v[0], v[1] = int64(out.DType()), int64(out.Dim())
	for i, d := range out.Shape() {
		v[2+i] = int64(d)
	}
	w := st.p.g.ISend(tensor.FromInt64(v), a.Peer, st.p.tag(tagMeta, a.Stage+1, 0))
	st.sends = append(st.sends, w)
	return nil
}

func (st *step) recvMeta(a schedule.Action) (meta, error) {
	t := tensor.New(tensor.Int64, 2+maxMetaDims)
	if err := st.p.g.IRecv(t, a.Peer, st.p.tag(tagMeta, a.Stage, 0)).Wait(st.ctx); err != nil {
		return meta{}, err
	}
	v := t.Int64s()
	dims := int(v[1])
	if dims < 0 || dims > maxMetaDims || v[0] <= 0 || v[0] > 255 || tensor.DType(v[0]).Size() == 0 {
		return meta{}, fmt.Errorf("stage %d's input: pipeline rank %d sent a malformed shape message %v", a.Stage, a.Peer, v)
	}
	md := meta{dtype: tensor.DType(v[0]), shape: make([]int, dims)}
	n := int64(1)
	for i := range dims {
		d := v[2+i]
		if d < 0 || d > 1<<40 {
			return meta{}, fmt.Errorf("stage %d's input: pipeline rank %d sent a malformed shape message %v", a.Stage, a.Peer, v)
		}
		md.shape[i] = int(d)
		n *= d
		if n > 1<<40 {
			return meta{}, fmt.Errorf("stage %d's input: pipeline rank %d announces a tensor of more than 2^40 elements", a.Stage, a.Peer)
		}
	}
	return md, nil
}

// reduceGrads sums the tied parameters' gradients over their groups and
// averages every gradient over the data-parallel group.
func (p *Pipeline) reduceGrads(ctx context.Context) error {
	for _, t := range p.opt.Tied {
		g := t.Param.Grad()
		if g == nil {
			g = tensor.New(t.Param.DType(), t.Param.Shape()...)
			t.Param.SetGrad(g)
		}
		if err := t.Group.AllReduce(ctx, g, dist.Sum); err != nil {
			return fmt.Errorf("pipeline: summing a tied parameter's gradient: %w", err)
		}
	}
	if p.opt.DataParallel == nil || p.opt.DataParallel.Size() == 1 {
		return nil
	}
	params := p.Parameters()
	n := 0
	for _, q := range params {
		if q.DType() != tensor.Float32 {
			return fmt.Errorf("pipeline: data-parallel averaging supports float32 parameters; one is %v", q.DType())
		}
		n += q.Value().Numel()
	}
	flat := tensor.New(tensor.Float32, n)
	at := 0
	for _, q := range params {
		k := q.Value().Numel()
		if g := q.Grad(); g != nil {
			flat.Narrow(0, at, k).Copy(g.Reshape(-1))
		}
		at += k
	}
	if err := p.opt.DataParallel.AllReduce(ctx, flat, dist.Avg); err != nil {
		return fmt.Errorf("pipeline: averaging gradients over the data-parallel group: %w", err)
	}
	at = 0
	for _, q := range params {
		k := q.Value().Numel()
		g := q.Grad()
		if g == nil {
			g = tensor.New(q.DType(), q.Shape()...)
			q.SetGrad(g)
		}
		g.Copy(flat.Narrow(0, at, k).Reshape(q.Shape()...))
		at += k
	}
	return nil
}

// ClipGradNorm clips the gradients of the whole model, spread over the
// pipeline's ranks, to a global L2 norm of maxNorm, as nn.ClipGradNorm
// does for a model on one rank, and returns the norm before clipping.
// Call it after Step (whose data-parallel averaging leaves every replica
// the same gradients) on every rank of the pipeline. A tied parameter
// counts once: only the copy on the lowest rank of its Tie group adds to
// the norm; every copy is scaled.
func (p *Pipeline) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	params := p.Parameters()
	var counted []*autograd.Var
	for _, q := range params {
		counts := true
		for _, t := range p.opt.Tied {
			if t.Param == q && t.Group.Rank() != 0 {
				counts = false
			}
		}
		if counts {
			counted = append(counted, q)
		}
	}
	sq := tensor.FromFloat64([]float64{nn.GradNormSquared(counted)})
	if err := p.g.AllReduce(ctx, sq, dist.Sum); err != nil {
		err = fmt.Errorf("pipeline: the gradients' global norm: %w", err)
		p.abort(err)
		return 0, err
	}
	total := math.Sqrt(sq.Float64s()[0])
	nn.ClipGradsWithNorm(params, maxNorm, total)
	return total, nil
}
