#pragma once
// The pool of KV-cache pages. A page holds the K and V of `page_size` consecutive positions of one
// sequence for every layer (docs/artifact.md, kv_cache.layout). Pages are reference counted: a
// page of a prompt prefix that the prefix cache holds (prefix_cache.hpp) may sit in the page table
// of several requests at once. The pool only counts: where the bytes of a page live is the
// engine's business (host memory for the CPU engine, one device allocation for the GPU engine).
//
// A page is in one of three states:
//  - held: one reference or more (the page tables that list it);
//  - free: no reference, nothing worth keeping;
//  - evictable: no reference, but marked cached: it holds a prefix the prefix cache can hand to a
//    later request. It stays until the pool needs it: allocate() takes free pages first, then
//    evicts the evictable page released longest ago (least recently used).
// free_pages() counts both kinds without a reference: what a new request can take.
#include <cstdint>
#include <span>
#include <vector>

namespace telos::exec {

using PageId = std::int32_t;

class KvPagePool {
 public:
  explicit KvPagePool(int num_pages);

  int num_pages() const { return static_cast<int>(ref_counts_.size()); }
  // Pages no request holds: free ones and evictable ones.
  int free_pages() const { return static_cast<int>(free_list_.size()) + evictable_; }
  int evictable_pages() const { return evictable_; }
  int used_pages() const { return num_pages() - free_pages(); }
  int ref_count(PageId page) const { return ref_counts_.at(static_cast<std::size_t>(page)); }
  bool cached(PageId page) const { return cached_.at(static_cast<std::size_t>(page)) != 0; }

  // Appends `count` pages, each with one reference, to `out`: free ones first, then evictable ones,
  // least recently released first; each of those is no longer cached and is appended to `evicted`
  // too (the prefix cache forgets it). When fewer than `count` are free it takes nothing and
  // returns false.
  bool allocate(int count, std::vector<PageId>& out, std::vector<PageId>& evicted);
  // Adds a holder to a page that is held or evictable (a prefix cache hit takes it back).
  void retain(PageId page);
  // Drops one reference; with none left the page is free, or evictable when it is cached.
  void release(PageId page);
  // Releases every page of a page table, last first, and clears it: the first page of the table
  // is the next one handed out, and of cached pages the end of a prefix is evicted before its
  // start (which more requests share).
  void release_all(std::vector<PageId>& pages);
  // Marks a held page as holding a cached prefix, so that it becomes evictable, not free, when its
  // last holder releases it.
  void mark_cached(PageId page);

  // Throws telos::Error unless the pool is consistent with the page tables of every live holder:
  // each page's reference count equals the number of times the tables list it; the free list
  // holds exactly the uncached pages nobody references, once each; the evictable list exactly the
  // cached ones nobody references, once each, and its links and count agree. Tests and debug
  // builds run it after every step.
  void check_invariant(std::span<const std::span<const PageId>> holders) const;

 private:
  void push_evictable(PageId page);    // at the most recently released end
  void unlink_evictable(PageId page);  // wherever it is

  std::vector<int> ref_counts_;
  std::vector<std::uint8_t> cached_;
  std::vector<PageId> free_list_;  // LIFO: a page just freed is warm in cache
  // The evictable pages as a doubly linked list through prev_/next_ (-1 ends it), least recently
  // released at lru_head_: a hit takes a page out of the middle in constant time.
  std::vector<PageId> prev_, next_;
  PageId lru_head_ = -1, lru_tail_ = -1;
  int evictable_ = 0;
};

}  // namespace telos::exec
