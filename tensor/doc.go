// Package tensor provides dense CPU tensors and the kernels that training
// MLPs, CNNs and small RNNs needs.
//
// A Tensor is a dtype, a shape, strides and a backing buffer. Views share
// the buffer; nothing is copied unless a method says so:
//
//	x := tensor.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
//	xt := x.T()                      // 3×2 view, no copy
//	y := new(tensor.Tensor).MatMul(x, xt) // 2×2; the zero value sizes itself
//	y.Add(y, tensor.Scalar(1))       // in place, broadcasting
//	b := y.Bytes()                   // the raw bytes, for the transport
//
// The receiver of an operation is its destination, as in gonum: an unsized
// (zero) destination takes the result's shape; a sized one must match.
// Exact aliasing (t.Add(t, b)) is in-place and allowed; partial overlap,
// and a MatMul destination sharing an operand's storage, panic.
//
// Storage of 256 bytes or more comes from a pool of recycled buffers, one
// sync.Pool per size: New clears what it reuses, Empty (torch.empty) and
// the destinations of operations that write every element do not, and
// Recycle gives storage back. The package never recycles on its own
// except its kernels' scratch space; autograd's engine recycles the
// intermediate tensors of a backward pass, under the ownership rule its
// package documentation states. Built with the tag godist_guard, a view
// of recycled storage panics when used, and recycled memory is poisoned
// with NaNs.
//
// Shape and dtype errors are programmer errors and panic, as in gonum; the
// layers that take input from the network check it before calling here.
//
// Matrix products go through internal/blas: pure Go (assembly kernels on
// amd64) by default, OpenBLAS with the build tag openblas.
package tensor
