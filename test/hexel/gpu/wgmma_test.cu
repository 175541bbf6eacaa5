// GPU tests of wgmma against a host fp32 reference: every N from 8 to 256 for bf16 with both
// operands in shared memory, and N in {8, 64, 136, 256} for f16, fp8 (e4m3, e5m2) and the
// register-A forms. Operands arrive by TMA with the 128B swizzle, one 128-byte row of K per
// row, consumed in four K slices through SmemDesc::advanced, as the GEMM does. And the
// warp-level e4m3 mma (hexel/mma.cuh) on the same tiles, read by ldmatrix, against the reference;
// and wgmma's e4m3 chain with its operands swapped, bit for bit against the chain (the W8A8 decode
// layer runs its one-block slots that way).
#include <algorithm>
#include <string>

#include "gpu_check.h"
#include "hexel/matrix_ldst.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/mma.cuh"
#include "hexel/tensor_map_encode.h"
#include "hexel/tma.cuh"
#include "hexel/wgmma.cuh"

namespace {

using hexel::Swizzle;
using hexel::wgmma::AbType;

constexpr uint32_t kRowBytes = 128;  // K extent of the test tile in bytes (one swizzle span)
constexpr uint32_t kSlices = 4;      // K slices of 32 bytes: k16 for 16-bit types, k32 for fp8

// The A tile (64 rows) and the B tile (n_rows rows) by TMA into dynamic shared memory, 1024-aligned
// for the 128B swizzle, by thread 0, every thread waiting for them; their shared addresses.
__device__ uint2 load_tiles(const hexel::TensorMap& a_map, const hexel::TensorMap& b_map,
                            uint32_t n_rows) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  const uint32_t a_s = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t b_s = a_s + 64 * kRowBytes;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(smem_addr(&bar), (64 + n_rows) * kRowBytes);
    tma::load(a_s, &a_map, smem_addr(&bar), 0, 0);
    tma::load(b_s, &b_map, smem_addr(&bar), 0, 0);
  }
  mbarrier::wait_parity(smem_addr(&bar), 0);
  return make_uint2(a_s, b_s);
}

template <int N, AbType T, bool RS>
__global__ void __launch_bounds__(128, 1)
    wgmma_kernel(const __grid_constant__ hexel::TensorMap a_map,
                 const __grid_constant__ hexel::TensorMap b_map, const uint8_t* a_global,
                 float* out) {
  using namespace hexel;
  const uint2 tiles = load_tiles(a_map, b_map, N);
  const uint32_t a_s = tiles.x, b_s = tiles.y;

  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t row = 16 * warp + lane / 4;
  float d[N / 2];
  const auto a_desc = wgmma::kmajor_desc(a_s, Swizzle::B128);
  const auto b_desc = wgmma::kmajor_desc(b_s, Swizzle::B128);
  for (uint32_t kk = 0; kk < kSlices; ++kk) {
    if constexpr (RS) {
      // The A fragment of K slice kk: 4 bytes at column byte 4*(lane%4) of rows row, row+8,
      // and 16 bytes further on (8 16-bit or 16 fp8 elements).
      const uint8_t* base = a_global + kk * 32 + 4 * (lane % 4);
      uint32_t a[4];
      auto word = [&](uint32_t r, uint32_t off) {
        uint32_t w;
        memcpy(&w, base + r * kRowBytes + off, 4);
        return w;
      };
      a[0] = word(row, 0);
      a[1] = word(row + 8, 0);
      a[2] = word(row, 16);
      a[3] = word(row + 8, 16);
      wgmma::fence();
      wgmma::mma_rs<N, T>(d, a, b_desc.advanced(kk * 32), kk > 0);
    } else {
      wgmma::fence();
      wgmma::mma_ss<N, T>(d, a_desc.advanced(kk * 32), b_desc.advanced(kk * 32), kk > 0);
    }
    wgmma::commit_group();
  }
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  for (int j = 0; j < N / 8; ++j) {
    const int col = 8 * j + 2 * (lane % 4);
    out[row * N + col] = d[4 * j];
    out[row * N + col + 1] = d[4 * j + 1];
    out[(row + 8) * N + col] = d[4 * j + 2];
    out[(row + 8) * N + col + 1] = d[4 * j + 3];
  }
}

// Random operand bytes with finite, moderate values, and their decoding.
uint8_t random_byte(std::mt19937& rng, AbType t) {
  const uint32_t s = rng() & 1u, m = rng();
  if (t == AbType::E4M3) return static_cast<uint8_t>(s << 7 | (5 + rng() % 4) << 3 | (m & 7u));
  return static_cast<uint8_t>(s << 7 | (13 + rng() % 4) << 2 | (m & 3u));  // E5M2
}

float decode(const uint8_t* p, AbType t) {
  if (t == AbType::BF16 || t == AbType::F16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return t == AbType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  const uint32_t b = *p, s = b >> 7;
  float v = t == AbType::E4M3 ? std::ldexp(1.f + float(b & 7u) / 8.f, int((b >> 3) & 15u) - 7)
                              : std::ldexp(1.f + float(b & 3u) / 4.f, int((b >> 2) & 31u) - 15);
  return s ? -v : v;
}

std::vector<uint8_t> random_operand(size_t rows, AbType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(rows * kRowBytes);
  if (t == AbType::BF16) {
    auto h = random_bf16(rows * kRowBytes / 2, seed);
    std::memcpy(v.data(), h.data(), v.size());
  } else if (t == AbType::F16) {
    for (size_t i = 0; i < v.size(); i += 2) {  // sign, exponent 13..15, 10 mantissa bits
      const uint16_t h =
          static_cast<uint16_t>((rng() & 1u) << 15 | (13 + rng() % 3) << 10 | (rng() & 0x3FFu));
      std::memcpy(&v[i], &h, 2);
    }
  } else {
    for (auto& b : v) b = random_byte(rng, t);
  }
  return v;
}

template <int N, AbType T, bool RS>
void run_wgmma() {
  SCOPED_TRACE("N=" + std::to_string(N) + (RS ? " RS" : " SS") + " type " +
               std::to_string(static_cast<int>(T)));
  const uint32_t elem = hexel::wgmma::k_per_mma<T> == 16 ? 2 : 1;
  const uint32_t k = kRowBytes / elem;
  auto a = random_operand(64, T, 17 + N);
  auto b = random_operand(N, T, 91 + N);
  DeviceBuffer<uint8_t> da(a.size()), db(b.size());
  DeviceBuffer<float> dout(64 * N);
  CUDA_OK(da.upload(a));
  CUDA_OK(db.upload(b));
  CUDA_OK(cudaMemset(dout.ptr, 0xFF, 64 * N * sizeof(float)));  // NaN poison
  const auto dt = elem == 2 ? hexel::TmaDtype::BF16 : hexel::TmaDtype::U8;
  const auto a_map = hexel::encode_2d(dt, da.ptr, 64, k, kRowBytes, 64, k, Swizzle::B128);
  const auto b_map = hexel::encode_2d(dt, db.ptr, N, k, kRowBytes, N, k, Swizzle::B128);
  const uint32_t smem = (64 + N) * kRowBytes + 1024;
  CUDA_OK(cudaFuncSetAttribute(wgmma_kernel<N, T, RS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem));
  wgmma_kernel<N, T, RS><<<1, 128, smem>>>(a_map, b_map, da.ptr, dout.ptr);
  LAUNCH_OK();
  auto got = dout.download();
  const float rel = elem == 2 ? 1e-5f : 1e-3f;  // Hopper fp8 MMA accumulates with fewer bits
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < N; ++c) {
      double ref = 0, mag = 0;
      for (uint32_t kk = 0; kk < k; ++kk) {
        const double p = double(decode(&a[r * kRowBytes + kk * elem], T)) *
                         decode(&b[c * kRowBytes + kk * elem], T);
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got[r * N + c], ref, rel * mag + 1e-6) << "D(" << r << ", " << c << ")";
    }
}

// Both 64 x 128-byte e4m3 tiles by TMA, then out_w = the wgmma chain m64n64k32 x 4 from zero (A
// rows against B rows), out_s = the same with B as wgmma's A and A as its B (stored transposed),
// and out_m = the same products by mma m16n8k32 chains from -0: warp w's A rows 16w .. 16w + 15
// (ldmatrix.x4 from the swizzled rows), B rows in column blocks of 8 (ldmatrix.x2).
__global__ void __launch_bounds__(128, 1)
    mma_e4m3_kernel(const __grid_constant__ hexel::TensorMap a_map,
                    const __grid_constant__ hexel::TensorMap b_map, float* out_w, float* out_s,
                    float* out_m) {
  using namespace hexel;
  const uint2 tiles = load_tiles(a_map, b_map, 64);
  const uint32_t a_s = tiles.x, b_s = tiles.y;
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, m = lane / 8;
  const uint32_t row = 16 * warp + lane / 4, col = 2 * (lane % 4);
  float d[32];
  const auto a_desc = wgmma::kmajor_desc(a_s, Swizzle::B128);
  const auto b_desc = wgmma::kmajor_desc(b_s, Swizzle::B128);
  wgmma::fence();
  for (uint32_t kk = 0; kk < kSlices; ++kk)
    wgmma::mma_ss<64, AbType::E4M3>(d, a_desc.advanced(kk * 32), b_desc.advanced(kk * 32), kk > 0);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operand(d);
  float t[32];
  wgmma::fence();
  for (uint32_t kk = 0; kk < kSlices; ++kk)
    wgmma::mma_ss<64, AbType::E4M3>(t, b_desc.advanced(kk * 32), a_desc.advanced(kk * 32), kk > 0);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operand(t);
  for (uint32_t j = 0; j < 8; ++j) {  // out_s[a row][b row], from t[b row][a row]
    out_s[(8 * j + col) * 64 + row] = t[4 * j];
    out_s[(8 * j + col + 1) * 64 + row] = t[4 * j + 1];
    out_s[(8 * j + col) * 64 + row + 8] = t[4 * j + 2];
    out_s[(8 * j + col + 1) * 64 + row + 8] = t[4 * j + 3];
  }
  // Byte k of row r of a swizzled tile: 16-byte chunk k / 16 at chunk (k / 16) ^ (r % 8).
  auto chunk = [](uint32_t base, uint32_t r, uint32_t c) {
    return base + r * kRowBytes + ((c ^ (r % 8)) * 16);
  };
  for (uint32_t j = 0; j < 8; ++j) {
    out_w[row * 64 + 8 * j + col] = d[4 * j];
    out_w[row * 64 + 8 * j + col + 1] = d[4 * j + 1];
    out_w[(row + 8) * 64 + 8 * j + col] = d[4 * j + 2];
    out_w[(row + 8) * 64 + 8 * j + col + 1] = d[4 * j + 3];
    float e[4] = {-0.f, -0.f, -0.f, -0.f};
    for (uint32_t kk = 0; kk < kSlices; ++kk) {
      uint32_t a[4], b[2];
      ldmatrix<4>(a, chunk(a_s, 16 * warp + (m & 1) * 8 + lane % 8, 2 * kk + (m >> 1)));
      ldmatrix<2>(b, chunk(b_s, 8 * j + lane % 8, 2 * kk + (m & 1)));
      mma_m16n8k32_e4m3(e, a, b[0], b[1]);
    }
    out_m[row * 64 + 8 * j + col] = e[0];
    out_m[row * 64 + 8 * j + col + 1] = e[1];
    out_m[(row + 8) * 64 + 8 * j + col] = e[2];
    out_m[(row + 8) * 64 + 8 * j + col + 1] = e[3];
  }
}

// Every finite e4m3 byte (subnormals, zeros, both signs) and its value.
float e4m3_any_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float v = e == 0 ? std::ldexp(float(m) / 8.f, -6) : std::ldexp(1.f + float(m) / 8.f, e - 7);
  return b & 0x80 ? -v : v;
}

template <AbType T, bool RS, int... Ns>
void sweep() {
  (run_wgmma<Ns, T, RS>(), ...);
}

TEST(Wgmma, Bf16SharedSharedEveryN) {
  REQUIRE_SM90();
  sweep<AbType::BF16, false, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136,
        144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256>();
}
TEST(Wgmma, Bf16RegisterA) {
  REQUIRE_SM90();
  sweep<AbType::BF16, true, 8, 64, 136, 256>();
}
TEST(Wgmma, F16SharedShared) {
  REQUIRE_SM90();
  sweep<AbType::F16, false, 8, 64, 136, 256>();
}
TEST(Wgmma, F16RegisterA) {
  REQUIRE_SM90();
  sweep<AbType::F16, true, 8, 136>();
}
TEST(Wgmma, E4m3SharedShared) {
  REQUIRE_SM90();
  sweep<AbType::E4M3, false, 8, 64, 136, 256>();
}
TEST(Wgmma, E4m3RegisterA) {
  REQUIRE_SM90();
  sweep<AbType::E4M3, true, 8, 64, 256>();
}
TEST(Wgmma, E5m2SharedShared) {
  REQUIRE_SM90();
  sweep<AbType::E5M2, false, 16, 128>();
}

TEST(Mma, E4m3MatchesReferenceAndSwappedWgmmaIsBitIdentical) {
  REQUIRE_SM90();
  constexpr uint32_t smem = 128 * kRowBytes + 1024;
  CUDA_OK(cudaFuncSetAttribute(mma_e4m3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<uint8_t> a(64 * kRowBytes), b(64 * kRowBytes);
    for (auto* v : {&a, &b})
      for (auto& x : *v) {
        do x = static_cast<uint8_t>(rng());
        while ((x & 0x7f) == 0x7f);  // NaN
      }
    DeviceBuffer<uint8_t> da(a.size()), db(b.size());
    DeviceBuffer<float> dw(64 * 64), ds(64 * 64), dm(64 * 64);
    CUDA_OK(da.upload(a));
    CUDA_OK(db.upload(b));
    for (float* p : {dw.ptr, ds.ptr, dm.ptr})
      CUDA_OK(cudaMemset(p, 0xFF, 64 * 64 * sizeof(float)));  // NaN poison
    const auto a_map = hexel::encode_2d(hexel::TmaDtype::U8, da.ptr, 64, kRowBytes, kRowBytes, 64,
                                        kRowBytes, Swizzle::B128);
    const auto b_map = hexel::encode_2d(hexel::TmaDtype::U8, db.ptr, 64, kRowBytes, kRowBytes, 64,
                                        kRowBytes, Swizzle::B128);
    mma_e4m3_kernel<<<1, 128, smem>>>(a_map, b_map, dw.ptr, ds.ptr, dm.ptr);
    LAUNCH_OK();
    const auto w = dw.download(), sw = ds.download(), m = dm.download();
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < 64; ++c) {
        double ref = 0, mag = 0;
        for (uint32_t k = 0; k < kRowBytes; ++k) {
          const double p =
              double(e4m3_any_value(a[r * kRowBytes + k])) * e4m3_any_value(b[c * kRowBytes + k]);
          ref += p;
          mag += std::fabs(p);
        }
        // wgmma's adder keeps fewer bits than f32 (2^-9 of the magnitudes: gemm_w8a8.cuh's bound);
        // mma.sync's keeps about f32's (its worst on an H100: 2.3e-7 of them).
        ASSERT_NEAR(w[r * 64 + c], ref, std::ldexp(mag, -9) + 1e-30)
            << "wgmma D(" << r << ", " << c << ")";
        ASSERT_NEAR(m[r * 64 + c], ref, std::ldexp(mag, -20) + 1e-30)
            << "mma D(" << r << ", " << c << ")";
        uint32_t uw, us;
        std::memcpy(&uw, &w[r * 64 + c], 4);
        std::memcpy(&us, &sw[r * 64 + c], 4);
        ASSERT_EQ(us, uw) << "D(" << r << ", " << c << "): swapped " << sw[r * 64 + c] << ", wgmma "
                          << w[r * 64 + c];
      }
  }
}

}  // namespace
