#include "executor/server/server_metrics.hpp"

#include <gtest/gtest.h>

namespace telos::exec {
namespace {

TEST(Histogram, RendersCumulativeBuckets) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);
  h.observe(0.5);
  h.observe(7);
  std::string out;
  h.render(out, "t", "help text");
  EXPECT_EQ(out,
            "# HELP t help text\n# TYPE t histogram\n"
            "t_bucket{le=\"0.1\"} 2\nt_bucket{le=\"1\"} 3\nt_bucket{le=\"+Inf\"} 4\n"
            "t_sum 7.65\nt_count 4\n");
}

}  // namespace
}  // namespace telos::exec
