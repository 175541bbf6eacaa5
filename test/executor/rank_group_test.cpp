// The host side of the GPU engine's tensor-parallel ranks (no device needed): the exchange the
// ranks load through, and NCCL loaded at run time with NVLink multicast off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "executor/gpu/nccl_library.hpp"
#include "executor/gpu/rank_exchange.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

TEST(RankExchange, EveryRankGetsEveryArenaInRankOrder) {
  RankExchange exchange(3);
  char buffers[3][2];
  std::vector<RankExchange::ArenaAddresses> seen[3];
  {
    std::vector<std::jthread> ranks;
    for (int r = 2; r >= 0; --r)  // arriving out of order
      ranks.emplace_back([&, r] {
        seen[r] = exchange.exchange_arenas(r, {{"partial", buffers[r]}, {"flags", buffers[r] + 1}});
      });
  }
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(seen[r].size(), 3u);
    for (int peer = 0; peer < 3; ++peer) {
      EXPECT_EQ(seen[r][peer].at("partial"), buffers[peer]);
      EXPECT_EQ(seen[r][peer].at("flags"), buffers[peer] + 1);
    }
  }
}

TEST(RankExchange, RanksTakeRankZerosPool) {
  RankExchange exchange(2);
  int pages = 0;
  std::jthread other([&] { pages = exchange.pool_pages(); });
  exchange.publish_pool_pages(77);
  other.join();
  EXPECT_EQ(pages, 77);
}

// A rank whose load fails releases the ranks waiting for it, with an error, instead of a hang.
TEST(RankExchange, AbandonWakesEveryWaiter) {
  RankExchange exchange(3);
  std::string errors[2];
  {
    std::jthread waiting_pool([&] {
      try {
        exchange.pool_pages();
      } catch (const Error& e) {
        errors[0] = e.what();
      }
    });
    std::jthread waiting_arenas([&] {
      try {
        exchange.exchange_arenas(1, {});
      } catch (const Error& e) {
        errors[1] = e.what();
      }
    });
    exchange.abandon();
  }
  for (const std::string& e : errors)
    EXPECT_EQ(e, "gpu engine: another tensor-parallel rank failed to load");
  EXPECT_THROW(exchange.exchange_arenas(2, {}), Error);  // a late arrival fails too
}

TEST(Nccl, MulticastOffUnlessTheEnvironmentSaysOtherwise) {
  unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_EQ(disable_nvlink_multicast(), "0");
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  EXPECT_EQ(disable_nvlink_multicast(), "1");
  unsetenv("NCCL_NVLS_ENABLE");
}

// libnccl.so.2 loads where the dynamic loader finds it, with every entry point Telos calls;
// where it does not, the error names the library and where to put it.
TEST(Nccl, LoadsAtRunTime) {
  try {
    const NcclLibrary& nccl = NcclLibrary::get();
    EXPECT_GE(nccl.version(), 20000) << "NCCL 2.x codes its version as major * 10000 + ...";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("libnccl.so.2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("LD_LIBRARY_PATH"), std::string::npos) << e.what();
    GTEST_SKIP() << "skipped: " << e.what();
  }
}

}  // namespace
}  // namespace telos::exec
