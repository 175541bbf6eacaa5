#include "compiler/plan/serving_config.hpp"

#include <algorithm>

#include "support/artifact_limits.hpp"
#include "support/error.hpp"
#include "support/tensor_parallel.hpp"

namespace telos::compiler {
namespace {

constexpr std::int64_t kDefaultMaxBatch = 256;
constexpr std::int64_t kDefaultPageSize = 16;
constexpr std::int64_t kDefaultPrefillChunk = 512;
constexpr std::int64_t kSmallestPrefillBucket = 16;
constexpr double kDefaultMemoryFraction = 0.9;

const std::vector<std::string> kFields = {"max_batch",        "max_seq_len",
                                          "kv_page_size",     "kv_pool",
                                          "prefill_chunk",    "decode_buckets",
                                          "prefill_buckets",  "targets",
                                          "tensor_parallel",  "decode_weight_images",
                                          "attention_split",  "quantize",
                                          "quantize_lm_head", "kv_dtype",
                                          "fp8_activations"};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, std::string where)
      : object_(object), where_(std::move(where)) {}

  [[noreturn]] void fail_field(const std::string& field, const std::string& message) const {
    fail(where_ + ": serving." + field + ": " + message);
  }

  const nlohmann::json* get(const std::string& field) const {
    if (object_.is_null()) return nullptr;
    auto it = object_.find(field);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer in [lo, hi]; floats, strings and booleans are refused.
  std::optional<std::int64_t> integer(const std::string& field, std::int64_t lo,
                                      std::int64_t hi) const {
    const nlohmann::json* v = get(field);
    if (!v) return std::nullopt;
    return integer_value(field, *v, lo, hi);
  }

  std::int64_t integer_value(const std::string& field, const nlohmann::json& v, std::int64_t lo,
                             std::int64_t hi) const {
    const std::string range = "expected an integer from " + std::to_string(lo) + " to " +
                              std::to_string(hi) + ", got " + v.dump();
    if (!v.is_number_integer()) fail_field(field, range);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
      fail_field(field, range);
    const auto n = v.get<std::int64_t>();
    if (n < lo || n > hi) fail_field(field, range);
    return n;
  }

  // A strictly increasing list of integers in [1, last] that ends with `last`.
  std::optional<std::vector<std::int64_t>> buckets(const std::string& field, std::int64_t last,
                                                   const std::string& last_name) const {
    const nlohmann::json* v = get(field);
    if (!v) return std::nullopt;
    if (!v->is_array() || v->empty())
      fail_field(field, "expected a non-empty array of increasing integers, got " + v->dump());
    std::vector<std::int64_t> out;
    for (const auto& item : *v) {
      const std::int64_t n = integer_value(field, item, 1, last);
      if (!out.empty() && n <= out.back())
        fail_field(field, "expected strictly increasing sizes, got " + v->dump());
      out.push_back(n);
    }
    if (out.back() != last)
      fail_field(field, "the largest bucket must equal " + last_name + " (" + std::to_string(last) +
                            ") so a full step has a graph, got " + v->dump());
    return out;
  }

  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& object_;
  std::string where_;
};

// Powers of two from `first` while below `last`, then `last` itself.
std::vector<std::int64_t> power_of_two_buckets(std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> out;
  for (std::int64_t b = first; b < last; b *= 2) out.push_back(b);
  out.push_back(last);
  return out;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::vector<std::string> parse_target_list(const std::string& list) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    std::size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    std::string target = list.substr(begin, end - begin);
    if (target == kCpuTarget) {
      if (list != kCpuTarget)
        fail(
            "--target: \"cpu\" (no GPU kernels: the CPU reference engine runs the artifact) is a "
            "target list of its own, not one of several");
      return {target};
    }
    if (std::find(kSupportedTargets.begin(), kSupportedTargets.end(), target) ==
        kSupportedTargets.end())
      fail("--target: unsupported architecture \"" + target + "\" (expected " +
           join(kSupportedTargets) + ", or cpu alone)");
    if (std::find(out.begin(), out.end(), target) != out.end())
      fail("--target: \"" + target + "\" is listed twice");
    out.push_back(target);
    begin = end + 1;
  }
  return out;
}

ServingConfig resolve_serving(const nlohmann::json& serving, const ModelSpec& spec,
                              const std::string& where) {
  if (!serving.is_null() && !serving.is_object())
    fail(where + ": serving: expected an object, got " + serving.dump());
  FieldReader r(serving, where);
  if (serving.is_object()) {
    for (const auto& [key, value] : serving.items()) {
      if (std::find(kFields.begin(), kFields.end(), key) == kFields.end())
        r.fail_field(key, "unknown field (expected one of " + join(kFields) + ")");
    }
  }

  ServingConfig c;
  c.kv_page_size = r.integer("kv_page_size", 1, limits::kMaxKvPageSize).value_or(kDefaultPageSize);
  if ((c.kv_page_size & (c.kv_page_size - 1)) != 0 || c.kv_page_size < limits::kMinKvPageSize)
    r.fail_field("kv_page_size", "expected a power of two from " +
                                     std::to_string(limits::kMinKvPageSize) + " to " +
                                     std::to_string(limits::kMaxKvPageSize) + ", got " +
                                     std::to_string(c.kv_page_size));

  c.max_seq_len = r.integer("max_seq_len", 1, spec.max_position_embeddings)
                      .value_or(spec.max_position_embeddings);

  if (const nlohmann::json* pool = r.get("kv_pool")) {
    if (!pool->is_object() || pool->size() != 1 ||
        !(pool->contains("pages") || pool->contains("memory_fraction")))
      r.fail_field("kv_pool",
                   "expected {\"pages\": N} or {\"memory_fraction\": F}, got " + pool->dump());
    if (pool->contains("pages")) {
      c.kv_pool_pages =
          r.integer_value("kv_pool.pages", pool->at("pages"), 1, limits::kMaxKvPoolPages);
      const std::int64_t one_sequence = ceil_div(c.max_seq_len, c.kv_page_size);
      if (*c.kv_pool_pages < one_sequence)
        r.fail_field("kv_pool.pages", std::to_string(*c.kv_pool_pages) +
                                          " pages cannot hold one sequence of max_seq_len " +
                                          std::to_string(c.max_seq_len) + " (needs " +
                                          std::to_string(one_sequence) + ")");
    } else {
      const nlohmann::json& f = pool->at("memory_fraction");
      if (!f.is_number() || f.get<double>() <= 0.0 || f.get<double>() > 1.0)
        r.fail_field("kv_pool.memory_fraction", "expected a number in (0, 1], got " + f.dump());
      c.kv_pool_memory_fraction = f.get<double>();
    }
  } else {
    c.kv_pool_memory_fraction = kDefaultMemoryFraction;
  }

  // Every sequence in a batch holds at least one page, so a fixed pool bounds the batch.
  const std::int64_t batch_limit =
      c.kv_pool_pages ? std::min(limits::kMaxBatch, *c.kv_pool_pages) : limits::kMaxBatch;
  if (const nlohmann::json* mb = r.get("max_batch")) {
    c.max_batch = r.integer_value("max_batch", *mb, 1, limits::kMaxBatch);
    if (c.max_batch > batch_limit)
      r.fail_field("max_batch", std::to_string(c.max_batch) + " exceeds kv_pool.pages (" +
                                    std::to_string(batch_limit) +
                                    "): every sequence needs at least one page");
  } else {
    c.max_batch = std::min(kDefaultMaxBatch, batch_limit);
  }

  c.prefill_chunk = r.integer("prefill_chunk", 1, c.max_seq_len)
                        .value_or(std::min(kDefaultPrefillChunk, c.max_seq_len));

  c.decode_buckets = r.buckets("decode_buckets", c.max_batch, "max_batch")
                         .value_or(power_of_two_buckets(1, c.max_batch));
  c.prefill_buckets =
      r.buckets("prefill_buckets", c.prefill_chunk, "prefill_chunk")
          .value_or(c.prefill_chunk <= kSmallestPrefillBucket
                        ? std::vector<std::int64_t>{c.prefill_chunk}
                        : power_of_two_buckets(kSmallestPrefillBucket, c.prefill_chunk));

  if (const nlohmann::json* t = r.get("targets")) {
    if (!t->is_array() || t->empty())
      r.fail_field("targets", "expected a non-empty array such as [\"sm_90a\"], got " + t->dump());
    std::string list;
    for (const auto& item : *t) {
      if (!item.is_string())
        r.fail_field("targets", "expected architecture names (strings), got " + t->dump());
      list += (list.empty() ? "" : ",") + item.get<std::string>();
    }
    try {
      c.targets = parse_target_list(list);
    } catch (const Error& e) {
      std::string message = e.what();
      r.fail_field("targets", message.substr(message.find(": ") + 2));
    }
  } else {
    c.targets = {"sm_90a"};
  }

  c.tensor_parallel = r.integer("tensor_parallel", 1, kMaxTensorParallel).value_or(1);
  if (const std::string why = tensor_parallel_refusal(c.tensor_parallel, spec.num_heads,
                                                      spec.num_kv_heads, spec.intermediate_size);
      !why.empty())
    r.fail_field("tensor_parallel", why);
  if (const nlohmann::json* w = r.get("decode_weight_images")) {
    if (!w->is_boolean())
      r.fail_field("decode_weight_images", "expected true or false, got " + w->dump());
    c.decode_weight_images = w->get<bool>();
  }
  if (const nlohmann::json* s = r.get("attention_split")) {
    if (!s->is_number_integer() || (s->get<std::int64_t>() != 256 && s->get<std::int64_t>() != 512))
      r.fail_field("attention_split", "expected 256 or 512, got " + s->dump());
    c.attention_split = s->get<std::int64_t>();
  }
  if (const nlohmann::json* q = r.get("quantize")) {
    if (!q->is_string() || !parse_quantize(q->get<std::string>(), &c.quantize))
      r.fail_field("quantize", std::string("expected ") + kQuantizeChoices + ", got " + q->dump());
  }
  if (const nlohmann::json* l = r.get("quantize_lm_head")) {
    if (!l->is_boolean())
      r.fail_field("quantize_lm_head", "expected true or false, got " + l->dump());
    c.quantize_lm_head = l->get<bool>();
  }
  if (const nlohmann::json* k = r.get("kv_dtype")) {
    if (*k == "fp8_e4m3")
      c.kv_dtype = DType::E4M3;
    else if (*k != "bf16")
      r.fail_field("kv_dtype", std::string("expected ") + kKvDtypeChoices + ", got " + k->dump());
  }
  if (const nlohmann::json* a = r.get("fp8_activations")) {
    if (*a == "bf16")
      c.fp8_activations = DType::BF16;
    else if (*a != "e4m3")
      r.fail_field("fp8_activations",
                   std::string("expected ") + kFp8ActivationChoices + ", got " + a->dump());
  }
  return c;
}

nlohmann::ordered_json serving_to_json(const ServingConfig& c) {
  nlohmann::ordered_json pool = nlohmann::ordered_json::object();
  if (c.kv_pool_pages)
    pool["pages"] = *c.kv_pool_pages;
  else
    pool["memory_fraction"] = *c.kv_pool_memory_fraction;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["max_batch"] = c.max_batch;
  j["max_seq_len"] = c.max_seq_len;
  j["kv_page_size"] = c.kv_page_size;
  j["kv_pool"] = pool;
  j["prefill_chunk"] = c.prefill_chunk;
  j["decode_buckets"] = c.decode_buckets;
  j["prefill_buckets"] = c.prefill_buckets;
  j["targets"] = c.targets;
  j["tensor_parallel"] = c.tensor_parallel;
  j["decode_weight_images"] = c.decode_weight_images;
  j["attention_split"] = c.attention_split;
  return j;
}

}  // namespace telos::compiler
