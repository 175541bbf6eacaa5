#include "executor/server/server_metrics.hpp"

#include <gtest/gtest.h>

#include "executor/cpu_reference_model.hpp"
#include "test/executor/tiny_artifact.hpp"

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

// The value of the sample line `name` in a Prometheus exposition, or -1.
double sample(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

// Two requests with the same 9-token prompt (pages of 4): the second takes 8 tokens from the
// prefix cache, and the exposition counts queries and hits in tokens.
TEST(ServerMetrics, CountsPrefixCacheQueriesAndHitsInTokens) {
  const std::string dir = testing::temp_dir("metrics-prefix");
  testing::write_tiny_artifact(dir, {});
  std::shared_ptr<const Artifact> artifact = Artifact::load(dir);
  auto engine = Engine::create(artifact, std::make_unique<CpuReferenceModel>(artifact));
  for (int i = 0; i < 2; ++i) {
    GenerationRequest r;
    r.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    r.sampling.max_tokens = 2;
    RequestHandle h = engine->submit(r);
    for (RequestEvent e; h->next(e);) {
    }
  }
  engine->wait_idle();
  ServerMetrics metrics;
  const std::string text = metrics.render(*engine, 0, 0);
  EXPECT_EQ(sample(text, "telos_prefix_cache_queries_total"), 18);
  EXPECT_EQ(sample(text, "telos_prefix_cache_hits_total"), 8);
  EXPECT_EQ(sample(text, "telos_kv_pages_cached"), 2);
  EXPECT_EQ(sample(text, "telos_kv_pages_used"), 0);
  EXPECT_EQ(sample(text, "telos_kv_pages_free"), sample(text, "telos_kv_pages_total"));
  EXPECT_NE(text.find("# TYPE telos_prefix_cache_hits_total counter\n"), std::string::npos);
}

}  // namespace
}  // namespace telos::exec
