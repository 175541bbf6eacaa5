// The GPU engine's KV pool sizing (runtime_limits.hpp, device_kv_pool_pages), the arithmetic it
// runs on cudaMemGetInfo's figures, here on the CPU: the artifact's pool within the memory free
// at start, less the headroom for graphs; --kv-pages refused when it cannot fit, naming the flag.
#include <gtest/gtest.h>

#include <string>

#include "executor/runtime_limits.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

// An 80 GiB device with 16 GiB of weights and the rest of the fixed memory, pages of 2 MiB (the
// 8B shape's), sequences of 256 pages.
DevicePoolInputs device(std::int64_t free_bytes) {
  DevicePoolInputs in;
  in.free_bytes = free_bytes;
  in.total_bytes = 80 * kGiB;
  in.fixed_bytes = 16 * kGiB;
  in.bytes_per_page = 2 * kMiB;
  in.sequence_pages = 256;
  return in;
}

std::string refusal(const DevicePoolInputs& in) {
  try {
    device_kv_pool_pages(in, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DevicePool, TheArtifactsPagesWhenTheyFit) {
  DevicePoolInputs in = device(78 * kGiB);
  in.artifact_pages = 1000;
  std::string note;
  EXPECT_EQ(device_kv_pool_pages(in, &note), 1000);
  EXPECT_EQ(note, "");
}

// Another process holds memory: the pool the artifact asks for no longer fits, and shrinks to
// what the free memory holds less the headroom, saying so and naming --kv-pages.
TEST(DevicePool, ShrinksTheArtifactsPoolToTheFreeMemory) {
  DevicePoolInputs in = device(20 * kGiB);
  in.artifact_pages = 30000;  // 60 GiB
  std::string note;
  const std::int64_t want = (20 * kGiB - 16 * kGiB - kDeviceHeadroomBytes) / (2 * kMiB);
  EXPECT_EQ(device_kv_pool_pages(in, &note), want);
  EXPECT_NE(note.find("the artifact's KV pool of 30000 pages"), std::string::npos) << note;
  EXPECT_NE(note.find("using " + std::to_string(want) + " pages (--kv-pages picks a count)"),
            std::string::npos)
      << note;
}

TEST(DevicePool, AMemoryFractionOfTheTotalWithinTheFreeMemory) {
  DevicePoolInputs in = device(78 * kGiB);
  in.memory_fraction = 0.5;  // 40 GiB, 24 of them left after the fixed 16
  EXPECT_EQ(device_kv_pool_pages(in, nullptr), 24 * kGiB / (2 * kMiB));
  in.free_bytes = 30 * kGiB;  // the free memory binds: 14 GiB less the headroom
  EXPECT_EQ(device_kv_pool_pages(in, nullptr), (14 * kGiB - kDeviceHeadroomBytes) / (2 * kMiB));
}

TEST(DevicePool, RefusesWhenNotOneSequenceFits) {
  DevicePoolInputs in = device(16 * kGiB + 300 * kMiB);  // 44 MiB after the headroom: 22 pages
  in.artifact_pages = 1000;
  const std::string why = refusal(in);
  EXPECT_NE(why.find("room for 22 KV pages of 2.0 MiB, fewer than one sequence of the artifact's "
                     "max_seq_len needs (256)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("lower --max-seq-len and pick a pool with --kv-pages"), std::string::npos)
      << why;
  // Less free memory than the fixed part alone.
  in.free_bytes = 8 * kGiB;
  EXPECT_NE(refusal(in).find("room for 0 KV pages"), std::string::npos) << refusal(in);
}

TEST(DevicePool, KvPagesAsGivenOrRefusedNamingTheMostThatFits) {
  DevicePoolInputs in = device(20 * kGiB);
  in.artifact_pages = 30000;
  in.asked_pages = 1500;  // 3 GiB of the 4 left: taken as given, headroom or not
  EXPECT_EQ(device_kv_pool_pages(in, nullptr), 1500);
  in.asked_pages = 3000;  // 6000 MiB
  EXPECT_EQ(refusal(in),
            "--kv-pages 3000 needs 6000.0 MiB of device memory, but the weights, slot images, "
            "arena and descriptors (16384.0 MiB) leave 4096.0 MiB of the 20480.0 MiB free on the "
            "device: pick a smaller pool with --kv-pages (at most 2048)");
}

// A pool is never sized past the most a manifest may ask for, however large the device.
TEST(DevicePool, NoMoreThanThePoolBound) {
  DevicePoolInputs in = device(std::int64_t{1} << 50);
  in.total_bytes = std::int64_t{1} << 50;
  in.bytes_per_page = 256;
  in.memory_fraction = 1.0;
  EXPECT_EQ(device_kv_pool_pages(in, nullptr), 1 << 24);
}

TEST(HostMemory, RefusesWhatTheHostCannotHoldNamingTheRemedy) {
  EXPECT_GT(host_memory_available(), 0);
  EXPECT_NO_THROW(check_host_memory("a small pool", 1 << 20, "ask for less"));
  try {
    check_host_memory("a pool of 2^60 bytes", std::int64_t{1} << 60, "pick a smaller pool");
    FAIL() << "2^60 bytes accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("a pool of 2^60 bytes needs "), 0u) << what;
    EXPECT_NE(what.find(" of host memory, more than the "), std::string::npos) << what;
    EXPECT_NE(what.find(" available: pick a smaller pool"), std::string::npos) << what;
  }
}

// An e4m3 KV cache (kv_cache.dtype e4m3) has pages of the same tokens in half the bytes: the same
// memory fraction gives twice the pages, so twice the tokens.
TEST(DevicePool, AnE4m3CacheHoldsTwiceTheTokensOfTheSameMemory) {
  DevicePoolInputs bf16 = device(78 * kGiB);
  bf16.memory_fraction = 0.5;  // 40 GiB, 24 of them left after the fixed 16
  DevicePoolInputs e4m3 = bf16;
  e4m3.bytes_per_page = bf16.bytes_per_page / 2;
  EXPECT_EQ(device_kv_pool_pages(bf16, nullptr), 12288);
  EXPECT_EQ(device_kv_pool_pages(e4m3, nullptr), 24576);
}

}  // namespace
}  // namespace telos::exec
