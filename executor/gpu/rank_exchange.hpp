#pragma once
// What the ranks of a tensor-parallel artifact tell each other while they load, each on its own
// thread (GpuRankGroup): rank 0's KV pool size, which every rank takes (one scheduler hands out
// the same pages on every rank), and every rank's arena buffers, from which each rank builds its
// `peer:NAME` tables (docs/multi-gpu.md). A rank whose load fails abandons the exchange, so the
// others stop waiting and fail too instead of hanging.
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "support/error.hpp"

namespace telos::exec {

class RankExchange {
 public:
  using ArenaAddresses = std::map<std::string, char*>;

  explicit RankExchange(int ranks) : arenas_(static_cast<std::size_t>(ranks)) {}

  // Rank 0, once its pool is allocated.
  void publish_pool_pages(int pages) {
    std::lock_guard lock(mutex_);
    pool_pages_ = pages;
    changed_.notify_all();
  }
  // Rank 0's pool pages, once published.
  int pool_pages() {
    std::unique_lock lock(mutex_);
    wait(lock, [&] { return pool_pages_.has_value(); });
    return *pool_pages_;
  }

  // Gives rank `rank`'s arena buffers; returns every rank's, in rank order, once all have given
  // theirs.
  std::vector<ArenaAddresses> exchange_arenas(int rank, ArenaAddresses arena) {
    std::unique_lock lock(mutex_);
    arenas_[static_cast<std::size_t>(rank)] = std::move(arena);
    ++arrived_;
    changed_.notify_all();
    wait(lock, [&] { return arrived_ == static_cast<int>(arenas_.size()); });
    return arenas_;
  }

  // A rank's load failed: every wait, now or later, throws.
  void abandon() {
    std::lock_guard lock(mutex_);
    abandoned_ = true;
    changed_.notify_all();
  }

 private:
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    changed_.wait(lock, [&] { return abandoned_ || ready(); });
    if (abandoned_) fail("gpu engine: another tensor-parallel rank failed to load");
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<int> pool_pages_;
  std::vector<ArenaAddresses> arenas_;
  int arrived_ = 0;
  bool abandoned_ = false;
};

}  // namespace telos::exec
