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
// Shape and dtype errors are programmer errors and panic, as in gonum; the
// layers that take input from the network check it before calling here.
//
// Matrix products go through internal/blas: pure Go (assembly kernels on
// amd64) by default, OpenBLAS with the build tag openblas.
package tensor
