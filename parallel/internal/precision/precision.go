// Package precision resolves the mixed-precision settings that DDP and
// FSDP share: a parameter dtype (the forward pass's, under Autocast; for
// FSDP also the gathers') and a reduction dtype.
package precision

import (
	"fmt"

	"github.com/godist/godist/autograd"
	"github.com/godist/godist/nn"
	"github.com/godist/godist/tensor"
)

// Resolve returns the parameter and reduction dtypes of a setting:
// tensor.Invalid (the zero value) is float32 for the parameter dtype and
// the parameter dtype for the reduction's, as PyTorch's defaults. A dtype
// other than float32, bfloat16 or float16 is an error that names it and
// pkg ("ddp", "fsdp").
func Resolve(pkg string, param, reduce tensor.DType) (tensor.DType, tensor.DType, error) {
	if param == tensor.Invalid {
		param = tensor.Float32
	}
	if reduce == tensor.Invalid {
		reduce = param
	}
	for _, d := range []tensor.DType{param, reduce} {
		if d != tensor.Float32 && d != tensor.BFloat16 && d != tensor.Float16 {
			return 0, 0, fmt.Errorf("%s: MixedPrecision with %v: use tensor.BFloat16, tensor.Float16 or tensor.Float32", pkg, d)
		}
	}
	return param, reduce, nil
}

// Call returns layer's output for x, computed under
// autograd.Autocast(d) when d is bfloat16 or float16 and as it is when d
// is float32: a mixed-precision forward pass.
func Call(d tensor.DType, layer nn.Layer, x *autograd.Var) *autograd.Var {
	if d == tensor.Float32 {
		return nn.Call(layer, x)
	}
	var y *autograd.Var
	autograd.Autocast(d, func() { y = nn.Call(layer, x) })
	return y
}
