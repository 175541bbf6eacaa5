#pragma once
// The pool of KV-cache pages. A page holds the K and V of `page_size` consecutive positions of one
// sequence for every layer (docs/artifact.md, kv_cache.layout). Pages are reference counted so
// that prefix sharing (several requests reading one prompt's pages) can slot in later; today each
// page has one holder. The pool only counts: where the bytes of a page live is the engine's
// business (host memory for the CPU engine, one device allocation for the GPU engine).
#include <cstdint>
#include <span>
#include <vector>

namespace telos::exec {

using PageId = std::int32_t;

class KvPagePool {
 public:
  explicit KvPagePool(int num_pages);

  int num_pages() const { return static_cast<int>(ref_counts_.size()); }
  int free_pages() const { return static_cast<int>(free_list_.size()); }
  int used_pages() const { return num_pages() - free_pages(); }
  int ref_count(PageId page) const { return ref_counts_.at(static_cast<std::size_t>(page)); }

  // Appends `count` pages, each with one reference, to `out`; when fewer than `count` are free it
  // takes nothing and returns false.
  bool allocate(int count, std::vector<PageId>& out);
  // Adds a holder to a page in use (prefix sharing).
  void retain(PageId page);
  // Drops one reference; the page is free again when none is left.
  void release(PageId page);
  // Releases every page of a page table and clears it.
  void release_all(std::vector<PageId>& pages);

  // Throws telos::Error unless the pool is consistent with the page tables of every live holder:
  // each page's reference count equals the number of times the tables list it, and the free list
  // holds exactly the pages nobody references, once each. Tests and debug builds run it after
  // every step.
  void check_invariant(std::span<const std::span<const PageId>> holders) const;

 private:
  std::vector<int> ref_counts_;
  std::vector<PageId> free_list_;  // LIFO: a page just freed is warm in cache
};

}  // namespace telos::exec
