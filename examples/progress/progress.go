// Package progress is the examples' training progress display and test
// accuracy: a bar redrawn in place on a terminal, plain periodic lines when
// the output is a file or a pipe.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// Bar shows one epoch's progress: steps done, the last loss and samples/s.
type Bar struct {
	// Unit names what Step counts ("samples" when empty).
	Unit       string
	w          io.Writer
	tty        bool
	label      string
	total, cur int
	samples    int
	scale      int // samples per step counted once per rank
	start      time.Time
	last       time.Time
	loss       float64
}

// New returns a bar for total steps written to w. Each step's samples are
// multiplied by world (the ranks stepping together).
func New(w io.Writer, label string, total, world int) *Bar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	now := time.Now()
	return &Bar{w: w, tty: tty, label: label, total: total, scale: max(world, 1), start: now, last: now}
}

// Step records a step of n samples (on this rank) ending with loss.
func (p *Bar) Step(loss float64, n int) {
	p.cur++
	p.samples += n * p.scale
	p.loss = loss
	now := time.Now()
	every := 5 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	if now.Sub(p.last) < every && p.cur != p.total {
		return
	}
	p.last = now
	rate := float64(p.samples) / now.Sub(p.start).Seconds()
	unit := p.Unit
	if unit == "" {
		unit = "samples"
	}
	if p.tty {
		const width = 30
		fill := width * p.cur / max(p.total, 1)
		fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d loss %.4f %.0f %s/s", p.label,
			strings.Repeat("=", fill), strings.Repeat(" ", width-fill), p.cur, p.total, p.loss, rate, unit)
		return
	}
	fmt.Fprintf(p.w, "%s step %d/%d loss %.4f %.0f %s/s\n", p.label, p.cur, p.total, p.loss, rate, unit)
}

// Done ends the bar's line on a terminal.
func (p *Bar) Done() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

// Accuracy evaluates m (in evaluation mode, without recording gradients)
// on images x and int64 labels y in batches of 1000, and returns the
// fraction classified right. m is left in training mode.
func Accuracy(m nn.Layer, x, y *tensor.Tensor) float64 {
	nn.Eval(m)
	defer nn.Train(m)
	correct := 0
	autograd.NoGrad(func() {
		for s := 0; s < x.Size(0); s += 1000 {
			n := min(1000, x.Size(0)-s)
			pred := tensor.Argmax(nn.Call(m, autograd.Const(x.Narrow(0, s, n))).Value(), 1).Int64s()
			for i, p := range pred {
				if int64(y.At(s+i)) == p {
					correct++
				}
			}
		}
	})
	return float64(correct) / float64(x.Size(0))
}
