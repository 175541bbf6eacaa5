#include "executor/kv_page_pool.hpp"

#include <string>

#include "support/error.hpp"

namespace telos::exec {

KvPagePool::KvPagePool(int num_pages) {
  if (num_pages < 1)
    fail("KV page pool: needs at least one page, got " + std::to_string(num_pages));
  ref_counts_.assign(static_cast<std::size_t>(num_pages), 0);
  free_list_.reserve(static_cast<std::size_t>(num_pages));
  // Highest id at the bottom so that a fresh pool hands out pages 0, 1, 2, ...
  for (PageId p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

bool KvPagePool::allocate(int count, std::vector<PageId>& out) {
  if (count < 0 || count > free_pages()) return false;
  for (int i = 0; i < count; ++i) {
    PageId p = free_list_.back();
    free_list_.pop_back();
    ref_counts_[static_cast<std::size_t>(p)] = 1;
    out.push_back(p);
  }
  return true;
}

void KvPagePool::retain(PageId page) {
  int& rc = ref_counts_.at(static_cast<std::size_t>(page));
  if (rc == 0) fail("KV page pool: retain of free page " + std::to_string(page));
  ++rc;
}

void KvPagePool::release(PageId page) {
  int& rc = ref_counts_.at(static_cast<std::size_t>(page));
  if (rc == 0) fail("KV page pool: release of free page " + std::to_string(page));
  if (--rc == 0) free_list_.push_back(page);
}

void KvPagePool::release_all(std::vector<PageId>& pages) {
  // Reverse order, so the first page of the table is the next one handed out.
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) release(*it);
  pages.clear();
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
  std::vector<int> on_free_list(ref_counts_.size(), 0);
  for (PageId p : free_list_) ++on_free_list[static_cast<std::size_t>(p)];
  for (std::size_t p = 0; p < ref_counts_.size(); ++p) {
    const std::string page = "KV page pool invariant: page " + std::to_string(p);
    if (held[p] != ref_counts_[p])
      fail(page + " has " + std::to_string(ref_counts_[p]) + " references but live requests hold " +
           std::to_string(held[p]));
    if (on_free_list[p] != (ref_counts_[p] == 0 ? 1 : 0))
      fail(page + " is on the free list " + std::to_string(on_free_list[p]) + " times with " +
           std::to_string(ref_counts_[p]) + " references");
  }
}

}  // namespace telos::exec
