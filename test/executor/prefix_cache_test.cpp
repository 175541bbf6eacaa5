#include "executor/prefix_cache.hpp"

#include <gtest/gtest.h>

#include <numeric>

#include "support/error.hpp"

namespace telos::exec {
namespace {

constexpr int kPageSize = 4;

std::vector<std::int32_t> tokens(int n, std::int32_t first = 10) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A request's side: its page table, as the scheduler keeps it, and its link.
struct Holder {
  std::vector<PageId> pages;
  PrefixLink link;
};

// A request that computed `t` in fresh pages and registered its full pages.
Holder computed(KvPagePool& pool, PrefixCache& cache, const std::vector<std::int32_t>& t,
                std::string_view salt = {}) {
  Holder h;
  h.link = cache.start(salt);
  std::vector<PageId> evicted;
  EXPECT_TRUE(
      pool.allocate(static_cast<int>(t.size() + kPageSize - 1) / kPageSize, h.pages, evicted));
  EXPECT_TRUE(evicted.empty());
  cache.insert(h.link, t, h.pages, static_cast<int>(t.size()) / kPageSize);
  return h;
}

std::vector<PageId> lookup(const PrefixCache& cache, const std::vector<std::int32_t>& t,
                           std::string_view salt = {}, int max_pages = 1 << 20) {
  PrefixLink link = cache.start(salt);
  std::vector<PageId> pages;
  cache.match(link, t, max_pages, pages);
  EXPECT_EQ(link.pages, static_cast<int>(pages.size()));
  return pages;
}

TEST(PrefixCache, FindsTheFullPagesOfARegisteredPrefix) {
  KvPagePool pool(16);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  Holder a = computed(pool, cache, tokens(10));  // two full pages and a partial one
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_TRUE(pool.cached(a.pages[0]) && pool.cached(a.pages[1]));
  EXPECT_FALSE(pool.cached(a.pages[2]));
  EXPECT_EQ(a.link.pages, 2);
  // A longer prompt with the same start finds both; a shorter one its one full page.
  EXPECT_EQ(lookup(cache, tokens(20)), (std::vector<PageId>{a.pages[0], a.pages[1]}));
  EXPECT_EQ(lookup(cache, tokens(7)), std::vector<PageId>{a.pages[0]});
  EXPECT_EQ(lookup(cache, tokens(20), {}, 1), std::vector<PageId>{a.pages[0]});
  cache.check_invariant();
}

TEST(PrefixCache, APageIsFoundOnlyAfterTheSamePrefix) {
  KvPagePool pool(16);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  Holder a = computed(pool, cache, tokens(8));
  // The same second page after another first page: its KV differs, so nothing past the change.
  std::vector<std::int32_t> other = tokens(8);
  other[1] = 99;
  EXPECT_TRUE(lookup(cache, other).empty());
  other = tokens(8);
  other[5] = 99;
  EXPECT_EQ(lookup(cache, other), std::vector<PageId>{a.pages[0]});
  // Registered after another first page, a's second page is an entry of its own.
  other = tokens(8);
  other[0] = 99;
  Holder b = computed(pool, cache, other);
  EXPECT_TRUE(pool.cached(b.pages[1]));
  EXPECT_EQ(lookup(cache, other), b.pages);
  EXPECT_EQ(lookup(cache, tokens(8)), a.pages);
  cache.check_invariant();
}

TEST(PrefixCache, SaltsAndArtifactsDoNotShare) {
  KvPagePool pool(16);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  computed(pool, cache, tokens(8), "tenant-a");
  EXPECT_EQ(lookup(cache, tokens(8), "tenant-a").size(), 2u);
  EXPECT_TRUE(lookup(cache, tokens(8), "tenant-b").empty());
  EXPECT_TRUE(lookup(cache, tokens(8)).empty());
  // The same tokens and salt under another artifact's identity.
  KvPagePool other_pool(16);
  PrefixCache other(other_pool, kPageSize, "xxh64:4567");
  EXPECT_NE(other.start("tenant-a").seed, cache.start("tenant-a").seed);
  EXPECT_NE(cache.start("tenant-a").seed, cache.start("tenant-b").seed);
  EXPECT_NE(cache.start("").seed, cache.start("tenant-a").seed);
}

// Two requests that computed the same prompt side by side: the second links to the first's pages
// and its own stay uncached (freed, not kept, when it ends).
TEST(PrefixCache, EqualContentIsRegisteredOnce) {
  KvPagePool pool(16);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  Holder a = computed(pool, cache, tokens(8));
  Holder b = computed(pool, cache, tokens(12));
  EXPECT_EQ(cache.cached_pages(), 3);
  EXPECT_FALSE(pool.cached(b.pages[0]) || pool.cached(b.pages[1]));
  EXPECT_TRUE(pool.cached(b.pages[2]));  // its third page continues a's two
  EXPECT_EQ(lookup(cache, tokens(12)), (std::vector<PageId>{a.pages[0], a.pages[1], b.pages[2]}));
  pool.release_all(b.pages);
  EXPECT_EQ(pool.evictable_pages(), 1);
  cache.check_invariant();
}

// An evicted page is forgotten; what was registered under it can no longer be found, and a
// request whose linked page was evicted registers nothing more.
TEST(PrefixCache, EvictionForgetsPagesAndCutsWhatFollows) {
  KvPagePool pool(4);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  Holder a = computed(pool, cache, tokens(8));
  const std::vector<PageId> a_pages = a.pages;
  pool.release_all(a.pages);
  EXPECT_EQ(pool.evictable_pages(), 2);
  // The pool runs out of free pages: the least recently released (the prefix's end) goes first.
  std::vector<PageId> held, evicted;
  ASSERT_TRUE(pool.allocate(3, held, evicted));
  ASSERT_EQ(evicted, std::vector<PageId>{a_pages[1]});
  cache.forget(evicted);
  cache.check_invariant();
  EXPECT_EQ(lookup(cache, tokens(8)), std::vector<PageId>{a_pages[0]});

  // b takes a's first page, then loses it to eviction before registering its second.
  Holder b;
  b.link = cache.start({});
  cache.match(b.link, tokens(8), 1, b.pages);
  ASSERT_EQ(b.pages, std::vector<PageId>{a_pages[0]});
  pool.release_all(held);
  evicted.clear();
  ASSERT_TRUE(pool.allocate(4, held, evicted));  // b never retained it: it is evicted too
  cache.forget(evicted);
  b.pages = {held[0], held[1]};
  cache.insert(b.link, tokens(8), b.pages, 2);
  EXPECT_TRUE(b.link.ended);
  EXPECT_EQ(cache.cached_pages(), 0);
  cache.check_invariant();
  EXPECT_THROW(cache.forget(evicted), Error);  // no longer cached
}

TEST(PrefixCache, InvariantCatchesAPageThePoolEvictedBehindItsBack) {
  KvPagePool pool(2);
  PrefixCache cache(pool, kPageSize, "xxh64:0123");
  Holder a = computed(pool, cache, tokens(4));
  pool.release_all(a.pages);
  std::vector<PageId> held, evicted;
  ASSERT_TRUE(pool.allocate(2, held, evicted));
  EXPECT_THROW(cache.check_invariant(), Error);  // evicted, but not forgotten
  cache.forget(evicted);
  cache.check_invariant();
}

}  // namespace
}  // namespace telos::exec
