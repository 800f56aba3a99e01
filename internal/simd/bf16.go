package simd

// bfloat16 in bulk: widening to float32 (exact: the bits shifted up) and
// rounding from float32 (to nearest even, NaNs kept quiet), as
// tensor.BFloat16ToFloat32 and tensor.BFloat16FromFloat32 do one at a
// time, bit for bit. On amd64 with AVX2 they run 16 lanes at a time;
// elsewhere they do nothing and the caller converts element by element.

// BF16ToF32 widens the longest prefix of src it can vectorise into dst
// (len(dst) >= len(src)) and returns its length.
func BF16ToF32(dst []float32, src []uint16) int { return bf16ToF32(dst[:len(src)], src) }

// F32ToBF16 rounds the longest prefix of src it can vectorise into dst
// (len(dst) >= len(src)) and returns its length.
func F32ToBF16(dst []uint16, src []float32) int { return f32ToBF16(dst[:len(src)], src) }

// RoundBF16 sets dst[i] to src[i] rounded to bfloat16 and widened back
// (float32(bfloat16(src[i])), in one pass: autocast's operands and
// results, kept in float32 storage) on the longest prefix of src it can
// vectorise (len(dst) >= len(src); dst may be src) and returns its
// length.
func RoundBF16(dst, src []float32) int { return roundBF16(dst[:len(src)], src) }
