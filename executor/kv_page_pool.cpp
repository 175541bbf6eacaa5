#include "executor/kv_page_pool.hpp"

#include <string>

#include "support/error.hpp"

namespace telos::exec {

KvPagePool::KvPagePool(int num_pages) {
  if (num_pages < 1)
    fail("KV page pool: needs at least one page, got " + std::to_string(num_pages));
  const auto n = static_cast<std::size_t>(num_pages);
  ref_counts_.assign(n, 0);
  cached_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  free_list_.reserve(n);
  // Highest id at the bottom so that a fresh pool hands out pages 0, 1, 2, ...
  for (PageId p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

void KvPagePool::push_evictable(PageId page) {
  const auto p = static_cast<std::size_t>(page);
  prev_[p] = lru_tail_;
  next_[p] = -1;
  if (lru_tail_ >= 0)
    next_[static_cast<std::size_t>(lru_tail_)] = page;
  else
    lru_head_ = page;
  lru_tail_ = page;
  ++evictable_;
}

void KvPagePool::unlink_evictable(PageId page) {
  const auto p = static_cast<std::size_t>(page);
  if (prev_[p] >= 0)
    next_[static_cast<std::size_t>(prev_[p])] = next_[p];
  else
    lru_head_ = next_[p];
  if (next_[p] >= 0)
    prev_[static_cast<std::size_t>(next_[p])] = prev_[p];
  else
    lru_tail_ = prev_[p];
  prev_[p] = next_[p] = -1;
  --evictable_;
}

bool KvPagePool::allocate(int count, std::vector<PageId>& out, std::vector<PageId>& evicted) {
  if (count < 0 || count > free_pages()) return false;
  for (int i = 0; i < count; ++i) {
    PageId p;
    if (!free_list_.empty()) {
      p = free_list_.back();
      free_list_.pop_back();
    } else {
      p = lru_head_;
      unlink_evictable(p);
      cached_[static_cast<std::size_t>(p)] = 0;
      evicted.push_back(p);
    }
    ref_counts_[static_cast<std::size_t>(p)] = 1;
    out.push_back(p);
  }
  return true;
}

void KvPagePool::retain(PageId page) {
  int& rc = ref_counts_.at(static_cast<std::size_t>(page));
  if (rc == 0) {
    if (!cached(page)) fail("KV page pool: retain of free page " + std::to_string(page));
    unlink_evictable(page);
  }
  ++rc;
}

void KvPagePool::release(PageId page) {
  int& rc = ref_counts_.at(static_cast<std::size_t>(page));
  if (rc == 0) fail("KV page pool: release of free page " + std::to_string(page));
  if (--rc > 0) return;
  if (cached(page))
    push_evictable(page);
  else
    free_list_.push_back(page);
}

void KvPagePool::release_all(std::vector<PageId>& pages) {
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) release(*it);
  pages.clear();
}

void KvPagePool::mark_cached(PageId page) {
  if (ref_count(page) == 0)
    fail("KV page pool: page " + std::to_string(page) + " is cached while nobody holds it");
  cached_[static_cast<std::size_t>(page)] = 1;
}

void KvPagePool::check_invariant(std::span<const std::span<const PageId>> holders) const {
  std::vector<int> held(ref_counts_.size(), 0);
  for (std::span<const PageId> table : holders)
    for (PageId p : table) {
      if (p < 0 || static_cast<std::size_t>(p) >= held.size())
        fail("KV page pool invariant: a page table lists page " + std::to_string(p) +
             ", outside the pool of " + std::to_string(num_pages()));
      ++held[static_cast<std::size_t>(p)];
    }
  std::vector<int> on_free_list(ref_counts_.size(), 0), on_evictable_list(ref_counts_.size(), 0);
  for (PageId p : free_list_) ++on_free_list[static_cast<std::size_t>(p)];
  int walked = 0;
  for (PageId p = lru_head_, before = -1; p >= 0 && walked <= num_pages();
       before = p, p = next_[static_cast<std::size_t>(p)], ++walked) {
    if (prev_[static_cast<std::size_t>(p)] != before)
      fail("KV page pool invariant: the evictable list's links disagree at page " +
           std::to_string(p));
    ++on_evictable_list[static_cast<std::size_t>(p)];
  }
  if (walked != evictable_)
    fail("KV page pool invariant: the evictable list has " + std::to_string(walked) +
         " pages where the pool counts " + std::to_string(evictable_));
  for (std::size_t p = 0; p < ref_counts_.size(); ++p) {
    const std::string page = "KV page pool invariant: page " + std::to_string(p);
    if (held[p] != ref_counts_[p])
      fail(page + " has " + std::to_string(ref_counts_[p]) + " references but live requests hold " +
           std::to_string(held[p]));
    const bool unheld = ref_counts_[p] == 0;
    if (on_free_list[p] != (unheld && !cached_[p] ? 1 : 0))
      fail(page + " is on the free list " + std::to_string(on_free_list[p]) + " times with " +
           std::to_string(ref_counts_[p]) + " references, cached " + std::to_string(cached_[p]));
    if (on_evictable_list[p] != (unheld && cached_[p] ? 1 : 0))
      fail(page + " is on the evictable list " + std::to_string(on_evictable_list[p]) +
           " times with " + std::to_string(ref_counts_[p]) + " references, cached " +
           std::to_string(cached_[p]));
  }
}

}  // namespace telos::exec
