#pragma once
// GET /metrics: the engine's counters and gauges and the server's own, in the Prometheus text
// exposition format (version 0.0.4). Latency histograms are cumulative: each scrape folds in the
// samples the engine collected since the previous one.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "executor/engine.hpp"

namespace telos::exec {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // HELP, TYPE, the cumulative _bucket lines (le="+Inf" last), _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One answered HTTP request, by status code.
  void count_response(int status);
  // The whole exposition. `in_flight` counts generation requests the HTTP side is serving,
  // `connections` the client connections open.
  std::string render(Engine& engine, int in_flight, int connections);

 private:
  std::mutex mutex_;
  std::map<int, std::uint64_t> responses_;
  Histogram time_to_first_token_, time_per_output_token_, queue_time_;
};

}  // namespace telos::exec
