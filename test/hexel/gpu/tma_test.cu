// GPU tests of TMA: byte-exact global -> shared -> global round trips for every swizzle, several
// box shapes and out-of-bounds tails, with the shared-memory image checked against the swizzle
// map; a 3D box; a weight's K-block view against the 2D boxes it replaces; multicast across a
// cluster; bulk copies; and the async-proxy fence before a TMA store of ordinarily written shared
// memory.
#include "gpu_check.h"
#include "hexel/cluster.cuh"
#include "hexel/mbarrier.cuh"
#include "hexel/sync.cuh"
#include "hexel/tensor_map_encode.h"
#include "hexel/tma.cuh"

namespace {

using hexel::Swizzle;

constexpr uint32_t kMaxBoxBytes = 32768;
constexpr uint32_t kSmemBytes = kMaxBoxBytes + 1024;

// One CTA per box: load it (after an L2 prefetch), dump the raw shared image, store it back.
template <int Rank>
__global__ void round_trip_kernel(const __grid_constant__ hexel::TensorMap in_map,
                                  const __grid_constant__ hexel::TensorMap out_map, uint8_t* raw,
                                  uint32_t box_bytes, int3 boxes, int3 box) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  // Swizzle patterns are address-based: align the box to the 1024-byte swizzle repeat.
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int bx = blockIdx.x % boxes.x, by = (blockIdx.x / boxes.x) % boxes.y,
            bz = blockIdx.x / (boxes.x * boxes.y);
  const int c0 = bx * box.x, c1 = by * box.y, c2 = bz * box.z;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::prefetch_map(&in_map);
    if constexpr (Rank == 2) tma::prefetch_tile(&in_map, c0, c1);
    // The full box counts toward the transaction bytes, out-of-bounds parts included.
    mbarrier::arrive_expect_tx(smem_addr(&bar), box_bytes);
    if constexpr (Rank == 2)
      tma::load(smem_addr(smem), &in_map, smem_addr(&bar), c0, c1);
    else
      tma::load(smem_addr(smem), &in_map, smem_addr(&bar), c0, c1, c2);
  }
  mbarrier::wait_parity(smem_addr(&bar), 0);
  for (uint32_t i = threadIdx.x; i < box_bytes; i += blockDim.x)
    raw[size_t(blockIdx.x) * box_bytes + i] = smem[i];
  if (threadIdx.x == 0) {
    if constexpr (Rank == 2)
      tma::store(&out_map, smem_addr(smem), c0, c1);
    else
      tma::store(&out_map, smem_addr(smem), c0, c1, c2);
    tma::commit_group();
    tma::wait_group<0>();
  }
}

struct RoundTripCase {
  uint32_t dims[3];  // elements, innermost first (dims[2] = 1 for 2D)
  uint32_t box[3];
  Swizzle swizzle;
};

void run_round_trip(const RoundTripCase& c) {
  const int rank = c.dims[2] > 1 || c.box[2] > 1 ? 3 : 2;
  const size_t elems = size_t(c.dims[0]) * c.dims[1] * c.dims[2];
  const uint32_t box_bytes = 2u * c.box[0] * c.box[1] * c.box[2];
  ASSERT_LE(box_bytes, kMaxBoxBytes);
  const int3 boxes{int((c.dims[0] + c.box[0] - 1) / c.box[0]),
                   int((c.dims[1] + c.box[1] - 1) / c.box[1]),
                   int((c.dims[2] + c.box[2] - 1) / c.box[2])};
  const int blocks = boxes.x * boxes.y * boxes.z;
  auto host = random_bf16(elems, 1234 + c.box[0] + c.dims[0]);
  DeviceBuffer<uint16_t> din(elems), dout(elems);
  DeviceBuffer<uint8_t> raw(size_t(blocks) * box_bytes);
  CUDA_OK(din.upload(host));
  CUDA_OK(cudaMemset(dout.ptr, 0xA5, elems * 2));

  hexel::TensorMapSpec spec;
  spec.rank = rank;
  spec.swizzle = c.swizzle;
  for (int i = 0; i < 3; ++i) {
    spec.dims[i] = c.dims[i];
    spec.box[i] = c.box[i];
  }
  spec.strides_bytes[0] = 2ull * c.dims[0];
  spec.strides_bytes[1] = 2ull * c.dims[0] * c.dims[1];
  spec.base = din.ptr;
  const auto in_map = hexel::encode_tiled(spec);
  spec.base = dout.ptr;
  const auto out_map = hexel::encode_tiled(spec);

  const int3 box{int(c.box[0]), int(c.box[1]), int(c.box[2])};
  if (rank == 2) {
    CUDA_OK(cudaFuncSetAttribute(round_trip_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes));
    round_trip_kernel<2>
        <<<blocks, 128, kSmemBytes>>>(in_map, out_map, raw.ptr, box_bytes, boxes, box);
  } else {
    CUDA_OK(cudaFuncSetAttribute(round_trip_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kSmemBytes));
    round_trip_kernel<3>
        <<<blocks, 128, kSmemBytes>>>(in_map, out_map, raw.ptr, box_bytes, boxes, box);
  }
  LAUNCH_OK();
  // Global image: byte-exact, and nothing outside the tensor was written (the stores clip).
  EXPECT_EQ(dout.download(), host);
  // Shared image: element (z, y, x) of the box sits at the swizzled offset of its row-major
  // position; out-of-bounds elements are zero.
  auto img = raw.download();
  for (int b = 0; b < blocks; ++b) {
    const uint32_t bx = b % boxes.x, by = (b / boxes.x) % boxes.y, bz = b / (boxes.x * boxes.y);
    for (uint32_t z = 0; z < c.box[2]; ++z)
      for (uint32_t y = 0; y < c.box[1]; ++y)
        for (uint32_t x = 0; x < c.box[0]; ++x) {
          const uint32_t gx = bx * c.box[0] + x, gy = by * c.box[1] + y, gz = bz * c.box[2] + z;
          const bool in = gx < c.dims[0] && gy < c.dims[1] && gz < c.dims[2];
          const uint16_t want =
              in ? host[(size_t(gz) * c.dims[1] + gy) * c.dims[0] + gx] : uint16_t{0};
          const uint32_t off =
              hexel::swizzled_offset(2 * ((z * c.box[1] + y) * c.box[0] + x), c.swizzle);
          uint16_t got;
          std::memcpy(&got, &img[size_t(b) * box_bytes + off], 2);
          ASSERT_EQ(got, want) << "box " << b << " element (" << z << "," << y << "," << x << ")";
        }
  }
}

TEST(TmaRoundTrip, Swizzle128BTails) {
  REQUIRE_SM90();
  run_round_trip({{200, 100, 1}, {64, 32, 1}, Swizzle::B128});
}
TEST(TmaRoundTrip, Swizzle128BTallBox) {
  REQUIRE_SM90();
  run_round_trip({{128, 300, 1}, {64, 256, 1}, Swizzle::B128});
}
TEST(TmaRoundTrip, Swizzle64B) {
  REQUIRE_SM90();
  run_round_trip({{96, 70, 1}, {32, 16, 1}, Swizzle::B64});
}
TEST(TmaRoundTrip, Swizzle32B) {
  REQUIRE_SM90();
  run_round_trip({{48, 33, 1}, {16, 8, 1}, Swizzle::B32});
}
TEST(TmaRoundTrip, NoSwizzleWideBox) {
  REQUIRE_SM90();
  run_round_trip({{520, 20, 1}, {256, 8, 1}, Swizzle::None});
}
TEST(TmaRoundTrip, NoSwizzleNarrowBox) {
  REQUIRE_SM90();
  run_round_trip({{40, 19, 1}, {8, 5, 1}, Swizzle::None});
}
TEST(TmaRoundTrip, ThreeDimensional128B) {
  REQUIRE_SM90();
  run_round_trip({{64, 24, 5}, {64, 8, 2}, Swizzle::B128});
}

TEST(TmaEncodeHost, RejectsBadSpecsWithTheField) {
  hexel::TensorMapSpec s;
  s.base = reinterpret_cast<const void*>(uintptr_t{256});
  s.dims[0] = 64;
  s.dims[1] = 64;
  s.strides_bytes[0] = 100;  // not a multiple of 16
  s.box[0] = 64;
  s.box[1] = 64;
  try {
    hexel::encode_tiled(s);
    FAIL() << "a 100-byte stride was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("strides_bytes[0]"), std::string::npos) << e.what();
  }
  s.strides_bytes[0] = 128;
  s.swizzle = Swizzle::B64;  // 64 bf16 = 128 bytes > 64-byte span
  try {
    hexel::encode_tiled(s);
    FAIL() << "a box wider than the swizzle span was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("swizzle span"), std::string::npos) << e.what();
  }
}

// A K-block view's box (hexel::encode_k_blocks: a ring slot's K blocks in one box) lands in
// shared memory as the 2D map's boxes of its K blocks and halves would, one after another: one
// copy into view_out, k_blocks · halves copies into flat_out.
__global__ void k_block_view_kernel(const __grid_constant__ hexel::TensorMap view,
                                    const __grid_constant__ hexel::TensorMap flat, uint8_t* view_out,
                                    uint8_t* flat_out, int row, int kb, int k_blocks, int halves,
                                    int box_rows, int half_rows) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  __shared__ alignas(8) unsigned long long bar[2];
  using namespace hexel;
  uint8_t* a = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t bytes = uint32_t(k_blocks * halves * box_rows * 128);
  uint8_t* b = a + (bytes + 1023u) / 1024u * 1024u;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar[0]), 1);
    mbarrier::init(smem_addr(&bar[1]), 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(smem_addr(&bar[0]), bytes);
    if (halves == 2)
      tma::load(smem_addr(a), &view, smem_addr(&bar[0]), 0, row, 0, kb);
    else
      tma::load(smem_addr(a), &view, smem_addr(&bar[0]), 0, row, kb);
    mbarrier::arrive_expect_tx(smem_addr(&bar[1]), bytes);
    for (int j = 0; j < k_blocks; ++j)
      for (int h = 0; h < halves; ++h)
        tma::load(smem_addr(b + (j * halves + h) * box_rows * 128), &flat, smem_addr(&bar[1]),
                  (kb + j) * 64, h * half_rows + row);
  }
  mbarrier::wait_parity(smem_addr(&bar[0]), 0);
  mbarrier::wait_parity(smem_addr(&bar[1]), 0);
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) {
    view_out[i] = a[i];
    flat_out[i] = b[i];
  }
}

TEST(TmaKBlockView, OneBoxLandsAsTheTwoDimensionalBoxes) {
  REQUIRE_SM90();
  constexpr uint32_t kRows = 256, kCols = 512;  // 8 K blocks
  auto host = random_bf16(size_t(kRows) * kCols, 4321);
  DeviceBuffer<uint16_t> w(size_t(kRows) * kCols);
  CUDA_OK(w.upload(host));
  CUDA_OK(cudaFuncSetAttribute(k_block_view_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               kSmemBytes));
  struct Case {
    int halves, k_blocks, box_rows, row, kb;
  };
  for (const Case c : {Case{1, 2, 32, 32, 2}, Case{2, 1, 32, 64, 3}, Case{2, 2, 16, 16, 4},
                       Case{1, 4, 16, 48, 4}, Case{1, 1, 48, 96, 7}}) {
    const int half_rows = int(kRows) / c.halves;
    const auto view = hexel::encode_k_blocks(w.ptr, kRows, kCols, uint32_t(c.box_rows),
                                             uint32_t(c.k_blocks), uint32_t(c.halves));
    const auto flat = hexel::encode_2d(hexel::TmaDtype::BF16, w.ptr, kRows, kCols, 2 * kCols,
                                       uint32_t(c.box_rows), 64, Swizzle::B128);
    const size_t bytes = size_t(c.k_blocks) * c.halves * c.box_rows * 128;
    DeviceBuffer<uint8_t> view_out(bytes), flat_out(bytes);
    CUDA_OK(cudaMemset(view_out.ptr, 0xA5, bytes));
    CUDA_OK(cudaMemset(flat_out.ptr, 0x5A, bytes));
    k_block_view_kernel<<<1, 128, kSmemBytes>>>(view, flat, view_out.ptr, flat_out.ptr, c.row,
                                                 c.kb, c.k_blocks, c.halves, c.box_rows, half_rows);
    LAUNCH_OK();
    EXPECT_EQ(view_out.download(), flat_out.download())
        << "halves " << c.halves << ", " << c.k_blocks << " K blocks of " << c.box_rows << " rows";
  }
}

TEST(TmaEncodeHost, KBlockViewRejectsWhatItCannotSee) {
  const void* base = reinterpret_cast<const void*>(uintptr_t{256});
  auto refused = [&](uint64_t rows, uint64_t cols, uint32_t halves, const std::string& why) {
    try {
      hexel::encode_k_blocks(base, rows, cols, 16, 1, halves);
      ADD_FAILURE() << rows << " x " << cols << " in " << halves << " halves was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(128, 96, 1, "whole 64-column blocks");
  refused(127, 128, 2, "halves must be 1, or 2 with an even row count");
  refused(128, 128, 3, "halves must be 1, or 2 with an even row count");
}

// Cluster of 2: rank 0 multicasts the top half of a 64 x 64 tile, rank 1 the bottom half, to
// both CTAs; each CTA's barrier expects the whole tile.
__global__ void __cluster_dims__(2, 1, 1)
    multicast_kernel(const __grid_constant__ hexel::TensorMap map, uint16_t* out) {
  __shared__ __align__(1024) uint16_t tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  const uint32_t rank = cluster::cta_rank();
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 1);
    mbarrier::fence_init();
  }
  cluster::sync();  // both barriers exist before either CTA multicasts into them
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(smem_addr(&bar), tma::tile_bytes<uint16_t>(64, 64));
    tma::load_multicast(smem_addr(&tile[rank * 32 * 64]), &map, smem_addr(&bar), 0b11, 0,
                        rank * 32);
  }
  mbarrier::wait_parity(smem_addr(&bar), 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) out[blockIdx.x * 64 * 64 + i] = tile[i];
  cluster::sync();  // neither CTA exits while the other's multicast may still write to it
}

TEST(TmaMulticast, ClusterOfTwoGetsTheWholeTile) {
  REQUIRE_SM90();
  auto host = random_bf16(64 * 64, 99);
  DeviceBuffer<uint16_t> din(64 * 64), dout(4 * 64 * 64);
  CUDA_OK(din.upload(host));
  const auto map =
      hexel::encode_2d(hexel::TmaDtype::BF16, din.ptr, 64, 64, 128, 32, 64, Swizzle::None);
  multicast_kernel<<<4, 128>>>(map, dout.ptr);
  LAUNCH_OK();
  auto got = dout.download();
  for (int b = 0; b < 4; ++b)
    EXPECT_TRUE(std::equal(host.begin(), host.end(), got.begin() + b * 64 * 64)) << "CTA " << b;
}

// Plain bulk copies both ways, and a TMA store of shared memory written by ordinary stores,
// which needs the async-proxy fence before the barrier.
__global__ void bulk_and_fence_kernel(const uint8_t* src, uint8_t* dst,
                                      const __grid_constant__ hexel::TensorMap out_map) {
  __shared__ __align__(128) uint8_t buf[4096];
  __shared__ __align__(128) uint16_t written[32 * 64];
  __shared__ alignas(8) unsigned long long bar;
  using namespace hexel;
  if (threadIdx.x == 0) {
    mbarrier::init(smem_addr(&bar), 1);
    mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier::arrive_expect_tx(smem_addr(&bar), 4096);
    tma::copy_g2s(smem_addr(buf), src, 4096, smem_addr(&bar));
  }
  for (int i = threadIdx.x; i < 32 * 64; i += blockDim.x) written[i] = static_cast<uint16_t>(i * 3);
  fence_proxy_async_smem();
  mbarrier::wait_parity(smem_addr(&bar), 0);
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::copy_s2g(dst, smem_addr(buf), 4096);
    tma::store(&out_map, smem_addr(written), 0, 0);
    tma::commit_group();
    tma::wait_group_read<0>();
  }
}

TEST(TmaBulk, CopiesAndProxyFence) {
  REQUIRE_SM90();
  std::vector<uint8_t> src(4096);
  for (int i = 0; i < 4096; ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
  DeviceBuffer<uint8_t> dsrc(4096), ddst(4096);
  DeviceBuffer<uint16_t> dout(32 * 64);
  CUDA_OK(dsrc.upload(src));
  const auto map =
      hexel::encode_2d(hexel::TmaDtype::BF16, dout.ptr, 32, 64, 128, 32, 64, Swizzle::None);
  bulk_and_fence_kernel<<<1, 128>>>(dsrc.ptr, ddst.ptr, map);
  LAUNCH_OK();
  EXPECT_EQ(ddst.download(), src);
  auto out = dout.download();
  for (int i = 0; i < 32 * 64; ++i) ASSERT_EQ(out[i], static_cast<uint16_t>(i * 3)) << i;
}

}  // namespace
