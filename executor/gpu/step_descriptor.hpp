#pragma once
// The step descriptor (docs/artifact.md, "descriptor field"): what a GPU step reads besides
// weights and the KV cache, one block of memory with the same layout in pinned host memory and
// on the device. Its layout, and the packing of one scheduled Step into it, are plain C++ (no
// CUDA), so both are unit-tested and timed on machines without a GPU.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "executor/model_backend.hpp"
#include "executor/scheduler.hpp"

namespace telos::exec {

// The sample kernel's SampleParams (codegen/kernels/sample.cuh), byte for byte.
struct DeviceSampleParams {
  float temperature, top_p, min_p;
  std::int32_t top_k;
  std::uint32_t seed_lo, seed_hi;
  std::int32_t counter, reserved;
};
static_assert(sizeof(DeviceSampleParams) == 32);

// Field offsets in bytes, each field 256-byte aligned: tokens, positions, token_seq,
// split_positions, prompt_positions [max_tokens] i32; sample_rows [max_sample_rows] i32;
// sample_params [max_sample_rows]; and last page_tables [max_batch][max_pages] i32, so that a step
// uploads only the rows it uses.
struct StepDescriptorLayout {
  int max_tokens = 0, max_sample_rows = 0, max_batch = 0, max_pages = 0;
  int page_size = 0, vocab = 0, kv_pages = 0;  // for the checks of pack_step_descriptor
  std::int64_t off_tokens = 0, off_positions = 0, off_token_seq = 0, off_split_positions = 0,
               off_prompt_positions = 0, off_sample_rows = 0, off_params = 0, off_page_tables = 0,
               bytes = 0;

  static StepDescriptorLayout make(int max_tokens, int max_sample_rows, int max_batch, int max_pages,
                                   int page_size, int vocab, int kv_pages);
};

// What one descriptor buffer's page-table rows hold: per row, the page table (its
// ScheduledSequence::pages_id) whose first `written` entries it holds. Packing the next step into
// the same buffer then writes only the entries a sequence added since (one page every page_size
// tokens) instead of its whole table again (at batch 64 and 8k positions, 33k entries a step).
struct PageRowCache {
  struct Row {
    std::uint64_t pages_id = 0;  // 0: nothing known
    int written = 0;
  };
  std::vector<Row> rows;  // max_batch
};

struct PackedStep {
  int sample_rows = 0;      // rows that sample, in step order
  std::int64_t upload = 0;  // bytes from the descriptor's start that the device must receive
};

// Writes `step` into `host` (layout.bytes long) for a bucket of `bucket_tokens` token rows and
// `bucket_sample_rows` sampling rows. Rows: the step's generated tokens (positions at or past their
// request's prompt_len) first, then its prompt tokens, each in sequence order, then padding rows
// (token 0, position -1, sequence 0); a sampling row names the row of its sequence's last token,
// -1 past the step's. split_positions holds the positions of generated tokens (-1 for prompt
// tokens and padding) and prompt_positions those of prompt tokens (-2 for generated tokens, -1 for
// padding), for the two attention kernels of prefill buckets; sequence i's page-table row holds its
// pages for positions up to its last (the rest of the row is not read and is left as it was).
// `sampling[i]` is sequence i's (greedy where absent). With `page_rows` (this buffer's, kept
// from the last step packed into it, empty the first time), a row that holds the same page table
// (the same nonzero pages_id) gets only its new entries. A token -(r+1) is passed on as it is: the
// embedding kernel reads the token that row r of the previous step sampled (ModelBackend::
// feeds_sampled_tokens); `fed_rows` is that step's number of sampling rows (0: none may be fed).
// Throws telos::Error naming the request, before anything reaches the device, on a token id,
// position or page id out of range, more tokens than the bucket, or more generated tokens than
// max_batch (a prefill bucket's split kernels cover its first max_batch rows only).
PackedStep pack_step_descriptor(const StepDescriptorLayout& layout, const Step& step,
                                int bucket_tokens, int bucket_sample_rows,
                                std::span<const DeviceSampling> sampling, int fed_rows, char* host,
                                PageRowCache* page_rows = nullptr);

// A bucket as the choice of a step's graph sees it: a decode bucket holds `size` sequences of one
// token, a prefill bucket `tokens` tokens of up to max_batch sequences; either samples at most
// `sample_rows` rows.
struct BucketShape {
  bool decode = false;
  int size = 0, tokens = 0, sample_rows = 0;
};

// The bucket a step runs in (an index into `buckets`): a decode bucket only for a step of one
// generated token a sequence (a prompt token always meets a prefill bucket's attention, as the
// scheduler's bucket kind says, so its bits never depend on what shares its step: docs/artifact.md,
// "Prompt and generated tokens"), preferred there; otherwise the smallest prefill bucket that
// holds the step. Throws telos::Error when none fits.
int choose_bucket(std::span<const BucketShape> buckets, const Step& step, int sampling_rows,
                  int max_batch);

// Whether choose_bucket can pick `bucket` when no step holds more than `runtime_max_batch`
// sequences nor more than `runtime_prefill_chunk` tokens (limits set at start, RuntimeLimits; 0:
// none): a decode bucket larger than the smallest one that holds runtime_max_batch never is, nor
// a prefill bucket larger than the smallest one that holds runtime_prefill_chunk tokens
// (choose_bucket takes the smallest bucket that fits, and a prefill bucket of T tokens samples
// min(T, max_batch) rows, all that a step of T tokens can have), so the engine neither loads nor
// captures them.
bool bucket_reachable(std::span<const BucketShape> buckets, const BucketShape& bucket,
                      int runtime_max_batch, int runtime_prefill_chunk);

}  // namespace telos::exec
