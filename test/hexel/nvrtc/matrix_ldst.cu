// ldmatrix / stmatrix, plain and transposed, x1/x2/x4.
// RUN: %hexel-nvrtc --arch=compute_90a %s -o %t.90.ptx
// RUN: %ptxas -arch=sm_90a %t.90.ptx -o %t.90.cubin
// RUN: FileCheck %s < %t.90.ptx
// RUN: %hexel-nvrtc --arch=compute_100a %s -o %t.100.ptx
// RUN: %ptxas -arch=sm_100a %t.100.ptx -o %t.100.cubin
// RUN: FileCheck %s < %t.100.ptx
#include "hexel/matrix_ldst.cuh"

extern "C" __global__ void matrix_ldst_kernel(unsigned* out) {
  __shared__ alignas(16) unsigned short tile[4 * 64];
  using namespace hexel;
  const uint32_t row = smem_addr(&tile[(threadIdx.x % 32) * 8]);
  uint32_t r1[1], r2[2], r4[4], t4[4];
  ldmatrix<1>(r1, row);
  ldmatrix<2>(r2, row);
  ldmatrix<4>(r4, row);
  ldmatrix<4, true>(t4, row);
  stmatrix<1>(row, r1);
  stmatrix<2>(row, r2);
  stmatrix<4>(row, r4);
  stmatrix<4, true>(row, t4);
  out[threadIdx.x] = tile[threadIdx.x];
}
// CHECK-LABEL: .entry matrix_ldst_kernel
// CHECK: ldmatrix.sync.aligned.m8n8.x1.shared.b16
// CHECK: ldmatrix.sync.aligned.m8n8.x2.shared.b16
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK: stmatrix.sync.aligned.m8n8.x1.shared.b16
// CHECK: stmatrix.sync.aligned.m8n8.x2.shared.b16
// CHECK: stmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK: stmatrix.sync.aligned.m8n8.x4.trans.shared.b16
