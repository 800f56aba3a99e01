package tensor

// RNGState is a saved position in an RNG's stream: an RNG set back to it
// (SetState) draws the same numbers again. Activation checkpointing saves
// the state of the generators a recomputed function draws from (dropout's
// masks), as PyTorch's preserve_rng_state does.
type RNGState struct {
	pcg []byte   // the PCG source's MarshalBinary
	mt  *mt19937 // a copy of NewTorchRNG's Mersenne Twister, else nil
}

// State returns g's position in its stream.
func (g *RNG) State() RNGState {
	b, err := g.pcg.MarshalBinary()
	if err != nil {
		panic("tensor: RNG state: " + err.Error()) // PCG's never fails
	}
	s := RNGState{pcg: b}
	if g.mt != nil {
		mt := *g.mt
		s.mt = &mt
	}
	return s
}

// SetState sets g back to a position State returned, of g or of a
// generator made the same way (NewRNG or NewTorchRNG).
func (g *RNG) SetState(s RNGState) {
	if s.pcg == nil || (s.mt == nil) != (g.mt == nil) {
		panic("tensor: SetState with the zero RNGState or one of a generator made another way (NewRNG, NewTorchRNG)")
	}
	if err := g.pcg.UnmarshalBinary(s.pcg); err != nil {
		panic("tensor: RNG state: " + err.Error()) // State's own encoding
	}
	if g.mt != nil {
		*g.mt = *s.mt
	}
}
