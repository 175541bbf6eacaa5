#pragma once
// The prefix cache: full KV pages of prompts, found again by their content, so that a request whose
// prompt starts like an earlier one (a chat's system prompt, a resent conversation) takes those
// pages instead of computing them.
//
// A page's KV depends on the model and on every token up to the page's end. The cache holds a page
// under the tokens of the page and the page before it in the prefix, and the first page of a prefix
// under a seed: a 128-bit hash of the artifact's identity (its manifest checksum) and the request's
// cache_salt, so that requests with different salts never share a page (tenants isolated, as in
// vLLM). Each entry holds its tokens and its parent's registration number (unique for the life of
// the process), and a lookup compares both: a hash collision costs a miss, never a wrong page.
//
// Only prompt pages are cached: a prompt token's K and V do not depend on the step that computes
// it (docs/artifact.md, "Prompt and generated tokens"), so a page computed in one request's prompt
// holds the bits another request's prompt would compute. Generated tokens are written by other
// kernels, and a page holding them is not offered.
//
// The pool keeps the pages: the cache marks a page cached (KvPagePool::mark_cached), and once no
// request holds it the page is evictable; the pool evicts the least recently released one when it
// runs out of free pages, and the cache forgets what was evicted.
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "executor/kv_page_pool.hpp"

namespace telos::exec {

// The longest cache_salt a request may carry, in bytes.
inline constexpr std::size_t kMaxCacheSaltBytes = 256;

struct PrefixSeed {
  std::uint64_t lo = 0, hi = 0;
  friend bool operator==(const PrefixSeed&, const PrefixSeed&) = default;
};

// How far a request's pages are in the cache: its pages 0 .. pages-1 are (its own, or equal ones
// another request registered first), the last of them as the cache's page `last_page`.
struct PrefixLink {
  PrefixSeed seed;
  int pages = 0;
  PageId last_page = -1;
  std::uint64_t last_number = 0;  // last_page's registration number
  // A page could not be linked (its parent was evicted, or its hash is taken by other content):
  // no later page of the request is registered.
  bool ended = false;
};

class PrefixCache {
 public:
  // `identity` names what a page's KV depends on besides its tokens (the artifact's manifest
  // checksum); `page_size` is the pool's positions a page.
  PrefixCache(KvPagePool& pool, int page_size, std::string_view identity);

  int page_size() const { return page_size_; }
  // Pages the cache holds, whether requests hold them too or not.
  int cached_pages() const { return static_cast<int>(index_.size()); }

  // A request's link before any of its pages is cached.
  PrefixLink start(std::string_view cache_salt) const;
  // Appends to `pages` the cached pages that continue `link` over the full pages of `tokens`, until
  // one is missing or `max_pages` are linked, and advances `link` over them. Takes no reference.
  void match(PrefixLink& link, std::span<const std::int32_t> tokens, int max_pages,
             std::vector<PageId>& pages) const;
  // Registers the pages of a request from link.pages to `full_pages` - 1: `pages` is its page
  // table, whose first `full_pages` pages hold the KV of `tokens`' first positions. A page whose
  // content the cache already holds stays the request's own; the link follows the cached one.
  void insert(PrefixLink& link, std::span<const std::int32_t> tokens, std::span<const PageId> pages,
              int full_pages);
  // Forgets pages the pool evicted (KvPagePool::allocate).
  void forget(std::span<const PageId> evicted);

  // Throws telos::Error unless the index and the pool's cached pages agree.
  void check_invariant() const;

 private:
  struct Entry {
    std::uint64_t number = 0;  // registration number; 0: the page holds no entry
    std::uint64_t parent = 0;  // the parent's number; 0: the first page of a prefix
    std::uint64_t key = 0;     // its key in index_
    PrefixSeed seed;
  };
  std::span<const std::int32_t> page_tokens(std::span<const std::int32_t> tokens, int page) const;
  std::uint64_t key_of(const PrefixLink& link, std::span<const std::int32_t> tokens) const;
  // The cached page that continues `link` with `tokens`, or -1.
  PageId find(const PrefixLink& link, std::span<const std::int32_t> tokens) const;
  void follow(PrefixLink& link, PageId page) const;

  KvPagePool& pool_;
  int page_size_;
  PrefixSeed identity_;
  std::vector<Entry> entries_;        // by page
  std::vector<std::int32_t> tokens_;  // by page: page_size tokens each
  std::unordered_map<std::uint64_t, PageId> index_;
  std::uint64_t last_number_ = 0;
};

}  // namespace telos::exec
