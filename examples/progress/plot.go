package progress

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Curves is what the examples plot: one value per training step (a line),
// and a few evaluations at given steps (a line through points).
type Curves struct {
	Title, YLabel string
	StepLabel     string    // the per-step line's legend
	Steps         []float64 // step i+1's value
	EvalLabel     string    // the evaluations' legend
	Evals         [][2]float64
}

// Save writes the curves as a PNG of the given height (8 inches wide).
func (c Curves) Save(path string, height vg.Length) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "step"
	p.Y.Label.Text = c.YLabel
	p.Legend.Top = true
	steps := make(plotter.XYs, len(c.Steps))
	for i, v := range c.Steps {
		steps[i] = plotter.XY{X: float64(i + 1), Y: v}
	}
	l, err := plotter.NewLine(steps)
	if err != nil {
		return err
	}
	l.Color = color.RGBA{R: 200, A: 255}
	p.Add(l)
	p.Legend.Add(c.StepLabel, l)
	if len(c.Evals) > 0 {
		evals := make(plotter.XYs, len(c.Evals))
		for i, v := range c.Evals {
			evals[i] = plotter.XY{X: v[0], Y: v[1]}
		}
		s, pts, err := plotter.NewLinePoints(evals)
		if err != nil {
			return err
		}
		s.Color = color.RGBA{B: 200, A: 255}
		pts.Color = s.Color
		p.Add(s, pts)
		p.Legend.Add(c.EvalLabel, s)
	}
	return p.Save(8*vg.Inch, height, path)
}
