#include "executor/prefix_cache.hpp"

#include <algorithm>
#include <string>

#include "support/checksum.hpp"
#include "support/error.hpp"

namespace telos::exec {

PrefixCache::PrefixCache(KvPagePool& pool, int page_size, std::string_view identity)
    : pool_(pool),
      page_size_(page_size),
      identity_{xxh64(identity.data(), identity.size(), 0),
                xxh64(identity.data(), identity.size(), 1)},
      entries_(static_cast<std::size_t>(pool.num_pages())),
      tokens_(static_cast<std::size_t>(pool.num_pages()) * static_cast<std::size_t>(page_size)) {
  if (page_size < 1) fail("prefix cache: page_size must be at least 1");
  index_.reserve(static_cast<std::size_t>(pool.num_pages()));
}

PrefixLink PrefixCache::start(std::string_view cache_salt) const {
  PrefixLink link;
  // Two hashes with independent seeds: 128 bits, so that no two salts share a seed in practice.
  link.seed = {xxh64(cache_salt.data(), cache_salt.size(), identity_.lo),
               xxh64(cache_salt.data(), cache_salt.size(), identity_.hi)};
  return link;
}

std::span<const std::int32_t> PrefixCache::page_tokens(std::span<const std::int32_t> tokens,
                                                       int page) const {
  return tokens.subspan(static_cast<std::size_t>(page) * static_cast<std::size_t>(page_size_),
                        static_cast<std::size_t>(page_size_));
}

std::uint64_t PrefixCache::key_of(const PrefixLink& link,
                                  std::span<const std::int32_t> tokens) const {
  return xxh64(tokens.data(), tokens.size_bytes(),
               link.pages == 0 ? link.seed.lo : link.last_number);
}

PageId PrefixCache::find(const PrefixLink& link, std::span<const std::int32_t> tokens) const {
  const auto it = index_.find(key_of(link, tokens));
  if (it == index_.end()) return -1;
  const PageId page = it->second;
  const Entry& e = entries_[static_cast<std::size_t>(page)];
  const std::uint64_t parent = link.pages == 0 ? 0 : link.last_number;
  const auto held = tokens_.begin() + static_cast<std::ptrdiff_t>(page) * page_size_;
  const bool same =
      e.parent == parent && e.seed == link.seed && std::equal(tokens.begin(), tokens.end(), held);
  return same ? page : -1;
}

void PrefixCache::follow(PrefixLink& link, PageId page) const {
  ++link.pages;
  link.last_page = page;
  link.last_number = entries_[static_cast<std::size_t>(page)].number;
}

void PrefixCache::match(PrefixLink& link, std::span<const std::int32_t> tokens, int max_pages,
                        std::vector<PageId>& pages) const {
  const int full = std::min(max_pages, static_cast<int>(tokens.size()) / page_size_);
  while (!link.ended && link.pages < full) {
    const PageId page = find(link, page_tokens(tokens, link.pages));
    if (page < 0) return;
    pages.push_back(page);
    follow(link, page);
  }
}

void PrefixCache::insert(PrefixLink& link, std::span<const std::int32_t> tokens,
                         std::span<const PageId> pages, int full_pages) {
  while (!link.ended && link.pages < full_pages) {
    // A parent evicted since it was linked: a page under it could never be found again.
    if (link.pages > 0 &&
        entries_[static_cast<std::size_t>(link.last_page)].number != link.last_number) {
      link.ended = true;
      return;
    }
    const std::span<const std::int32_t> content = page_tokens(tokens, link.pages);
    const std::uint64_t key = key_of(link, content);
    if (index_.count(key)) {
      const PageId cached = find(link, content);
      if (cached < 0) {
        link.ended = true;  // the key is taken by other content
        return;
      }
      follow(link, cached);
      continue;
    }
    const PageId page = pages[static_cast<std::size_t>(link.pages)];
    entries_[static_cast<std::size_t>(page)] = {
        ++last_number_, link.pages == 0 ? 0 : link.last_number, key, link.seed};
    std::copy(content.begin(), content.end(),
              tokens_.begin() + static_cast<std::ptrdiff_t>(page) * page_size_);
    index_.emplace(key, page);
    pool_.mark_cached(page);
    follow(link, page);
  }
}

void PrefixCache::forget(std::span<const PageId> evicted) {
  for (PageId page : evicted) {
    Entry& e = entries_[static_cast<std::size_t>(page)];
    if (e.number == 0) fail("prefix cache: page " + std::to_string(page) + " evicted uncached");
    index_.erase(e.key);
    e = Entry{};
  }
}

void PrefixCache::check_invariant() const {
  std::size_t entries = 0;
  for (std::size_t p = 0; p < entries_.size(); ++p) {
    const Entry& e = entries_[p];
    const PageId page = static_cast<PageId>(p);
    const std::string who = "prefix cache invariant: page " + std::to_string(p);
    if ((e.number != 0) != pool_.cached(page))
      fail(who + (e.number != 0 ? " has an entry but the pool does not count it cached"
                                : " is cached in the pool but has no entry"));
    if (e.number == 0) continue;
    ++entries;
    const auto it = index_.find(e.key);
    if (it == index_.end() || it->second != page) fail(who + " is not indexed under its key");
  }
  if (entries != index_.size())
    fail("prefix cache invariant: the index has " + std::to_string(index_.size()) + " keys for " +
         std::to_string(entries) + " entries");
}

}  // namespace telos::exec
