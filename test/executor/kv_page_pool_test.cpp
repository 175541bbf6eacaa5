#include "executor/kv_page_pool.hpp"

#include <gtest/gtest.h>

#include "support/error.hpp"

namespace telos::exec {
namespace {

std::vector<std::span<const PageId>> tables(const std::vector<std::vector<PageId>>& holders) {
  return {holders.begin(), holders.end()};
}

TEST(KvPagePool, AllocatesAllOrNothing) {
  KvPagePool pool(4);
  std::vector<PageId> a;
  EXPECT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<PageId>{0, 1, 2}));
  EXPECT_EQ(pool.free_pages(), 1);
  std::vector<PageId> b;
  EXPECT_FALSE(pool.allocate(2, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_pages(), 1);
  pool.check_invariant(tables({a}));
}

TEST(KvPagePool, ReleaseReturnsPagesAndReferenceCountsShare) {
  KvPagePool pool(4);
  std::vector<PageId> a;
  ASSERT_TRUE(pool.allocate(2, a));
  std::vector<PageId> shared = {a[0]};
  pool.retain(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.check_invariant(tables({a, shared}));
  pool.release_all(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.used_pages(), 1);  // still held through `shared`
  pool.check_invariant(tables({shared}));
  pool.release_all(shared);
  EXPECT_EQ(pool.free_pages(), 4);
  pool.check_invariant({});
}

TEST(KvPagePool, InvariantCatchesALeakAndADoubleHolder) {
  KvPagePool pool(3);
  std::vector<PageId> a;
  ASSERT_TRUE(pool.allocate(2, a));
  // A page the pool counts as used but no live request holds: a leak.
  std::vector<PageId> forgot_one = {a[0]};
  EXPECT_THROW(pool.check_invariant(tables({forgot_one})), Error);
  // Two holders of a page with one reference.
  EXPECT_THROW(pool.check_invariant(tables({a, forgot_one})), Error);
}

TEST(KvPagePool, ReleasingAFreePageIsAnError) {
  KvPagePool pool(2);
  EXPECT_THROW(pool.release(0), Error);
  EXPECT_THROW(pool.retain(1), Error);
  EXPECT_THROW(KvPagePool(0), Error);
}

}  // namespace
}  // namespace telos::exec
