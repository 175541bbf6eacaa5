#include "executor/kv_page_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/error.hpp"

namespace telos::exec {
namespace {

std::vector<std::span<const PageId>> tables(const std::vector<std::vector<PageId>>& holders) {
  return {holders.begin(), holders.end()};
}

TEST(KvPagePool, AllocatesAllOrNothing) {
  KvPagePool pool(4);
  std::vector<PageId> a, evicted;
  EXPECT_TRUE(pool.allocate(3, a, evicted));
  EXPECT_EQ(a, (std::vector<PageId>{0, 1, 2}));
  EXPECT_EQ(pool.free_pages(), 1);
  std::vector<PageId> b;
  EXPECT_FALSE(pool.allocate(2, b, evicted));
  EXPECT_TRUE(evicted.empty());
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.free_pages(), 1);
  pool.check_invariant(tables({a}));
}

TEST(KvPagePool, ReleaseReturnsPagesAndReferenceCountsShare) {
  KvPagePool pool(4);
  std::vector<PageId> a, evicted;
  ASSERT_TRUE(pool.allocate(2, a, evicted));
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
  std::vector<PageId> a, evicted;
  ASSERT_TRUE(pool.allocate(2, a, evicted));
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
  EXPECT_THROW(pool.mark_cached(1), Error);  // nobody holds it
  EXPECT_THROW(KvPagePool(0), Error);
  pool.check_invariant({});
}

// A cached page nobody holds stays out of the free list: it is evictable, counted free, and a
// holder can take it back.
TEST(KvPagePool, ACachedPageIsKeptUntilThePoolNeedsIt) {
  KvPagePool pool(3);
  std::vector<PageId> a, evicted;
  ASSERT_TRUE(pool.allocate(2, a, evicted));
  pool.mark_cached(a[0]);
  EXPECT_TRUE(pool.cached(a[0]));
  EXPECT_FALSE(pool.cached(a[1]));
  const PageId kept = a[0];
  pool.release_all(a);
  EXPECT_EQ(pool.free_pages(), 3);
  EXPECT_EQ(pool.evictable_pages(), 1);
  EXPECT_EQ(pool.used_pages(), 0);
  pool.check_invariant({});
  // A hit takes it back without allocating.
  pool.retain(kept);
  EXPECT_EQ(pool.ref_count(kept), 1);
  EXPECT_EQ(pool.evictable_pages(), 0);
  std::vector<PageId> hit = {kept};
  pool.check_invariant(tables({hit}));
  pool.release_all(hit);
  // Uncached free pages go first; the cached one only when nothing else is left.
  std::vector<PageId> b;
  ASSERT_TRUE(pool.allocate(2, b, evicted));
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(std::count(b.begin(), b.end(), kept), 0);
  ASSERT_TRUE(pool.allocate(1, b, evicted));
  EXPECT_EQ(evicted, std::vector<PageId>{kept});
  EXPECT_FALSE(pool.cached(kept));
  EXPECT_EQ(pool.free_pages(), 0);
  pool.check_invariant(tables({b}));
  pool.release_all(b);
  EXPECT_EQ(pool.evictable_pages(), 0);  // evicted: free, no longer kept
  pool.check_invariant({});
}

// Evictable pages go least recently released first, whatever their ids.
TEST(KvPagePool, EvictsTheLeastRecentlyReleasedFirst) {
  KvPagePool pool(4);
  std::vector<PageId> pages, evicted;
  ASSERT_TRUE(pool.allocate(4, pages, evicted));
  for (PageId p : pages) pool.mark_cached(p);
  // Released in the order 2, 0, 3, 1; then 0 is taken back and released again: 2, 3, 1, 0.
  for (PageId p : {2, 0, 3, 1}) pool.release(p);
  pool.retain(0);
  pool.release(0);
  pool.check_invariant({});
  std::vector<PageId> taken;
  ASSERT_TRUE(pool.allocate(3, taken, evicted));
  EXPECT_EQ(evicted, (std::vector<PageId>{2, 3, 1}));
  EXPECT_EQ(taken, evicted);
  EXPECT_EQ(pool.evictable_pages(), 1);
  pool.check_invariant(tables({taken}));
}

TEST(KvPagePool, InvariantCatchesAHolderOfAnEvictablePage) {
  KvPagePool pool(2);
  std::vector<PageId> a, evicted;
  ASSERT_TRUE(pool.allocate(1, a, evicted));
  pool.mark_cached(a[0]);
  // The table still lists the page, but the pool counts it released: the holder count is off.
  const std::vector<PageId> stale = a;
  pool.release_all(a);
  EXPECT_THROW(pool.check_invariant(tables({stale})), Error);
  pool.check_invariant({});
}

}  // namespace
}  // namespace telos::exec
