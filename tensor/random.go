package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// RNG is a seeded source of random numbers for initialisation, dropout and
// shuffling. The same seed gives the same stream on every machine. An RNG
// is not safe for concurrent use.
type RNG struct {
	r   *rand.Rand
	pcg *rand.PCG // r's source, for State and SetState
	mt  *mt19937  // set by NewTorchRNG: Uniform and Perm follow PyTorch
}

// NewRNG returns a generator seeded with seed.
func NewRNG(seed uint64) *RNG {
	pcg := rand.NewPCG(seed, 0x9e3779b97f4a7c15)
	return &RNG{r: rand.New(pcg), pcg: pcg}
}

// Float64 returns a uniform number in [0, 1).
func (g *RNG) Float64() float64 { return g.r.Float64() }

// NormFloat64 returns a standard normal number.
func (g *RNG) NormFloat64() float64 { return g.r.NormFloat64() }

// IntN returns a uniform integer in [0, n).
func (g *RNG) IntN(n int) int { return g.r.IntN(n) }

// Perm returns a random permutation of 0..n-1 (torch.randperm's for a
// generator from NewTorchRNG).
func (g *RNG) Perm(n int) []int {
	if g.mt != nil {
		return g.mt.randperm(n)
	}
	return g.r.Perm(n)
}

// Uniform fills t with numbers uniform in [lo, hi) and returns t. With a
// generator from NewTorchRNG the numbers are those of torch's uniform_.
func (t *Tensor) Uniform(g *RNG, lo, hi float64) *Tensor {
	if g.mt != nil {
		from, to := float32(lo), float32(hi)
		return t.fillFunc(func() float64 { return float64(g.mt.uniform(from, to)) })
	}
	return t.fillFunc(func() float64 { return lo + (hi-lo)*g.r.Float64() })
}

// Normal fills t with normal numbers of the given mean and standard
// deviation and returns t.
func (t *Tensor) Normal(g *RNG, mean, std float64) *Tensor {
	return t.fillFunc(func() float64 { return mean + std*g.r.NormFloat64() })
}

func (t *Tensor) fillFunc(f func() float64) *Tensor {
	if !t.dtype.IsFloat() {
		panic(fmt.Sprintf("tensor: random fill of a %v tensor", t.dtype))
	}
	it := newIndex(t.shape)
	for it.next() {
		t.store(t.offset(it.idx), f())
	}
	return t
}

// Randn returns a float32 tensor of standard normal numbers.
func Randn(g *RNG, shape ...int) *Tensor { return Zeros(shape...).Normal(g, 0, 1) }

// Rand returns a float32 tensor of numbers uniform in [0, 1).
func Rand(g *RNG, shape ...int) *Tensor { return Zeros(shape...).Uniform(g, 0, 1) }

// Fans returns the fan-in and fan-out of a weight of the given shape, as
// torch.nn.init._calculate_fan_in_and_fan_out: dimension 1 is the input,
// dimension 0 the output, and any further dimensions are the receptive
// field.
func Fans(shape []int) (fanIn, fanOut int) {
	if len(shape) < 2 {
		panic(fmt.Sprintf("tensor: fan of a weight of shape %v", shape))
	}
	field := numel(shape[2:])
	return shape[1] * field, shape[0] * field
}

// KaimingUniform fills t as torch.nn.init.kaiming_uniform_(t, a) with
// fan_in mode and the leaky_relu gain: uniform in ±gain·√(3/fan_in), where
// gain = √(2/(1+a²)). With a = √5 this is PyTorch's default for Linear and
// Conv weights (bound 1/√fan_in).
func (t *Tensor) KaimingUniform(g *RNG, a float64) *Tensor {
	fanIn, _ := Fans(t.shape)
	gain := math.Sqrt(2 / (1 + a*a))
	std := gain / math.Sqrt(float64(fanIn))
	bound := math.Sqrt(3) * std // the same double arithmetic as torch.nn.init
	return t.Uniform(g, -bound, bound)
}
