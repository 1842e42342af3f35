// The parity tests compare with a float32 reference that multiplies dequantised weights: run the
// engine's matmul in Exact precision (no int8 activations; see tensor/matmul.h). The Fast (int8)
// precision is tested against its own error bound in tests/tensor/test_int8.cpp.
#include "tensor/matmul.h"

namespace {
const bool kExactMatmul = (kvec::set_matmul_precision(kvec::MatmulPrecision::Exact), true);
}  // namespace
