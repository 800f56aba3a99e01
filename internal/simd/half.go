package simd

// IEEE half precision (float16) in bulk: conversions to and from float32
// and the sum of two half vectors, for the compressing DDP hooks, FSDP's
// mixed precision and the reductions of float16 collectives. On amd64
// with F16C they run 8 or 16 lanes at a time (VCVTPS2PH rounding to
// nearest even, VCVTPH2PS exact); elsewhere they do nothing and the
// caller converts element by element (tensor.Float16FromFloat32 and
// tensor.Float16ToFloat32, which agree with the instructions bit for bit
// on every input but NaNs, whose payloads may differ).

// F32ToF16 rounds the longest prefix of src it can vectorise into dst
// (len(dst) >= len(src)) and returns its length.
func F32ToF16(dst []uint16, src []float32) int { return f32ToF16(dst[:len(src)], src) }

// F16ToF32 widens the longest prefix of src it can vectorise into dst
// (len(dst) >= len(src)) and returns its length.
func F16ToF32(dst []float32, src []uint16) int { return f16ToF32(dst[:len(src)], src) }

// AddF16 sets dst[i] to float32(dst[i]) + float32(src[i]) rounded to half
// (len(src) >= len(dst)) on the longest prefix it can vectorise and
// returns its length.
func AddF16(dst, src []uint16) int { return addF16(dst, src[:len(dst)]) }

// RoundF16 sets dst[i] to src[i] rounded to half and widened back, as
// RoundBF16 does to bfloat16 (dst may be src), on the longest prefix it
// can vectorise, and returns its length.
func RoundF16(dst, src []float32) int { return roundF16(dst[:len(src)], src) }
