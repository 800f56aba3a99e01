package dp

import (
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// DataParallel wraps a module so that Forward splits the batch across
// goroutines (see the package documentation). It is an nn.Layer; its
// parameters are the wrapped module's, and its state dict holds them under
// "module.", as torch.nn.DataParallel's.
//
// A DataParallel must not be used from two goroutines at once, and the
// wrapped module must not change (modes aside) while a forward pass runs.
type DataParallel struct {
	nn.Base
	// Module is the wrapped module.
	Module  nn.Layer
	workers int
}

var _ nn.Layer = (*DataParallel)(nil)

// New wraps module to run on up to workers goroutines; workers 0 means
// runtime.GOMAXPROCS(0). It panics if workers is negative.
func New(module nn.Layer, workers int) *DataParallel {
	if workers < 0 {
		panic(fmt.Sprintf("dp: New with %d workers", workers))
	}
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	d := &DataParallel{Module: module, workers: workers}
	d.RegisterModule("module", module)
	return d
}

// Workers returns the most chunks (and goroutines) a forward pass uses.
func (d *DataParallel) Workers() int { return d.workers }

// StateDict returns the wrapped module's state under "module." names.
func (d *DataParallel) StateDict() map[string]*tensor.Tensor { return nn.StateDict(d) }

// Forward runs the wrapped module on x, a batch along dimension 0. It cuts
// x into at most Workers chunks as torch.chunk does (chunks of
// ceil(n/Workers) rows, the last one smaller, so a batch of n < Workers
// rows gives n chunks of one), runs nn.Call(Module, chunk) for each —
// concurrently, or serially when SerialReason says so — and concatenates
// the outputs along dimension 0 with autograd.Cat (0-d outputs, one per
// chunk, are stacked into a vector, as torch's gather does). A batch of one
// chunk, or an empty batch, goes to the module whole.
//
// A panic in a chunk's forward pass is raised again on the calling
// goroutine, with the same value, after every chunk has finished; if
// several chunks panic, the first chunk's value wins.
func (d *DataParallel) Forward(x *autograd.Var) *autograd.Var {
	if x.Value().Dim() == 0 {
		panic("dp: DataParallel input is a scalar; it needs a batch dimension 0 to split")
	}
	n := x.Value().Size(0)
	if d.workers <= 1 || n <= 1 {
		return nn.Call(d.Module, x)
	}
	chunks := autograd.Chunk(x, 0, d.workers)
	outs := make([]*autograd.Var, len(chunks))
	if reason := d.SerialReason(); reason != "" {
		d.serial(chunks, outs)
	} else {
		d.concurrent(chunks, outs)
	}
	if outs[0].Value().Dim() == 0 {
		return autograd.Stack(0, outs...)
	}
	return autograd.Cat(0, outs...)
}

// concurrent runs each chunk on its own goroutine.
func (d *DataParallel) concurrent(chunks, outs []*autograd.Var) {
	panics := make([]any, len(chunks))
	panicked := make([]bool, len(chunks))
	var wg sync.WaitGroup
	for i, c := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := false
			defer func() {
				if !ok { // a panic, or runtime.Goexit
					panics[i], panicked[i] = recover(), true
				}
			}()
			outs[i] = nn.Call(d.Module, c)
			ok = true
		}()
	}
	wg.Wait()
	for i := range chunks {
		if panicked[i] {
			panic(panics[i])
		}
	}
}

// serial runs the chunks in order on the calling goroutine and leaves the
// buffers as the first chunk left them, as PyTorch's DataParallel keeps
// only the device-0 replica's buffer updates.
func (d *DataParallel) serial(chunks, outs []*autograd.Var) {
	outs[0] = nn.Call(d.Module, chunks[0])
	bufs := nn.NamedBuffers(d.Module)
	saved := make([]*tensor.Tensor, len(bufs))
	for i, b := range bufs {
		saved[i] = b.Value.Clone()
	}
	for i := 1; i < len(chunks); i++ {
		outs[i] = nn.Call(d.Module, chunks[i])
	}
	for i, b := range bufs {
		b.Value.Copy(saved[i])
	}
}

// SerialReason says why the next forward pass would run its chunks one
// after another rather than concurrently, naming the modules whose forward
// changes state (see the package documentation), or returns "" when the
// chunks would run concurrently. The answer depends on the modules'
// training modes, so it can change after nn.Train or nn.Eval.
func (d *DataParallel) SerialReason() string {
	// Buffer names by tensor, to name the modules that hold them.
	bufName := map[*tensor.Tensor]string{}
	for _, b := range nn.NamedBuffers(d.Module) {
		bufName[b.Value] = b.Name
	}
	var why []string
	visit(d.Module, func(m nn.Module) {
		tm, ok := m.(interface{ Training() bool })
		if !ok || !tm.Training() {
			return
		}
		if do, ok := m.(*nn.Dropout); ok {
			if do.P != 0 {
				why = append(why, fmt.Sprintf("a %T (p=%g) draws its masks from one shared random source", m, do.P))
			}
			return
		}
		var names []string
		if len(bufName) == 0 {
			return // no buffers anywhere
		}
		for _, b := range ownBuffers(m) {
			names = append(names, bufName[b])
		}
		if len(names) > 0 {
			why = append(why, fmt.Sprintf("a %T with buffers %s may update them in forward", m, strings.Join(names, ", ")))
		}
	})
	if len(why) == 0 {
		return ""
	}
	return "in training mode, " + strings.Join(why, "; ")
}

// visit calls fn on m and each of its submodules, depth first.
//
// nn has no read-only module walk; ReplaceModules with a function that
// replaces nothing is one (it stores each child back unchanged).
func visit(m nn.Module, fn func(nn.Module)) {
	nn.ReplaceModules(m, func(x nn.Module) nn.Module {
		fn(x)
		return nil
	})
}

// ownBuffers returns the buffers registered on m itself, not on its
// children.
func ownBuffers(m nn.Module) []*tensor.Tensor {
	inChild := map[*tensor.Tensor]bool{}
	first := true
	visit(m, func(x nn.Module) {
		if first { // m itself
			first = false
			return
		}
		for _, b := range nn.NamedBuffers(x) {
			inChild[b.Value] = true
		}
	})
	var out []*tensor.Tensor
	for _, b := range nn.NamedBuffers(m) {
		if !inChild[b.Value] {
			out = append(out, b.Value)
		}
	}
	return out
}
