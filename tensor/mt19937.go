package tensor

// mt19937 is the 32-bit Mersenne Twister that PyTorch's CPU generator uses.
// With it, NewTorchRNG reproduces torch.manual_seed(seed) followed by
// uniform_ and randperm exactly, so initial weights and data orders can be
// matched with PyTorch's.
type mt19937 struct {
	state [624]uint32
	index int
}

func newMT19937(seed uint64) *mt19937 {
	m := &mt19937{}
	m.state[0] = uint32(seed)
	for i := 1; i < 624; i++ {
		prev := m.state[i-1]
		m.state[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	m.index = 624
	return m
}

func (m *mt19937) next() uint32 {
	if m.index >= 624 {
		m.twist()
	}
	y := m.state[m.index]
	m.index++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (m *mt19937) twist() {
	const upper, lower = 0x80000000, 0x7fffffff
	for i := range 624 {
		y := m.state[i]&upper | m.state[(i+1)%624]&lower
		v := m.state[(i+397)%624] ^ (y >> 1)
		if y&1 != 0 {
			v ^= 0x9908b0df
		}
		m.state[i] = v
	}
	m.index = 0
}

// NewTorchRNG returns a generator that draws the same numbers as PyTorch's
// CPU generator after torch.manual_seed(seed): Uniform fills (and so the
// default initialisation of Linear and Conv2d, drawn in registration order)
// and Perm (torch.randperm) match PyTorch 1.13 exactly. Normal does not
// follow PyTorch's algorithm.
func NewTorchRNG(seed uint64) *RNG {
	g := NewRNG(seed)
	g.mt = newMT19937(seed)
	return g
}

// torchUniform is at::uniform_real_distribution<float>: 24 random bits
// scaled to [0, 1), then from + x·(to - from) in double.
func (m *mt19937) uniform(from, to float32) float32 {
	x := float64(m.next()&(1<<24-1)) * (1.0 / (1 << 24))
	return float32(x*(float64(to)-float64(from)) + float64(from))
}

// randperm is PyTorch's CPU randperm: a Fisher-Yates shuffle drawing
// random() % (n - i).
func (m *mt19937) randperm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := 0; i < n-1; i++ {
		z := int(uint64(m.next()) % uint64(n-i))
		p[i], p[z+i] = p[z+i], p[i]
	}
	return p
}
