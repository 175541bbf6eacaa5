#pragma once
// A fan-out onto a few threads for the host's bulk work (the artifact's checksums, the weight
// upload's staging): the caller's work() runs on this thread and on up to `threads` - 1 more.
#include <algorithm>
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

}  // namespace telos
