#pragma once
// A fan-out onto a few threads for the host's bulk work (the artifact's checksums, the weight
// upload's staging).
#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

namespace telos {

// Runs work() on this thread and on up to min(threads, the hardware's) - 1 more, returning once
// every call has returned. work() takes its share from a queue of its own (an atomic index), so
// that where a thread cannot be created the ones running take the rest.
template <class Work>
void run_on_threads(std::size_t threads, Work&& work) {
  const std::size_t n =
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), threads);
  std::vector<std::jthread> helpers;
  try {
    for (std::size_t t = 1; t < n; ++t) helpers.emplace_back([&work] { work(); });
  } catch (const std::system_error&) {
    // No more threads to be had: the ones running take the rest of the queue.
  }
  work();
}

// Runs fn(begin, end) over [0, n) in up to max_parts contiguous parts of at least `grain` items
// (one part where n < 2 · grain), in order of their start, on as many threads (run_on_threads).
template <class Fn>
void for_each_part(std::size_t n, std::size_t grain, std::size_t max_parts, Fn&& fn) {
  const std::size_t parts = std::clamp<std::size_t>(n / std::max<std::size_t>(grain, 1), 1,
                                                    std::max<std::size_t>(max_parts, 1));
  std::atomic<std::size_t> next{0};
  run_on_threads(parts, [&] {
    for (std::size_t i = next++; i < parts; i = next++) fn(n * i / parts, n * (i + 1) / parts);
  });
}

}  // namespace telos
