#pragma once
// The bounds on every size a model config, a serving config or an artifact's manifest may state,
// each defined once with its reason. The importer refuses a config.json beyond them, the serving
// config resolver a serving section beyond them, and the shared manifest validation
// (artifact_format.hpp) a manifest beyond them, before anything is allocated from them. Each is far
// above what any supported model or deployment uses and keeps every product the tools form (rows x
// columns, pages x bytes a page) inside 64 bits and every dimension inside the 32-bit integers the
// kernels and the engines index with.
#include <cstdint>

namespace telos::limits {

// Model shapes. The largest supported checkpoints stay well below (Llama-3.1-405B: hidden 16384,
// intermediate 53248, 126 layers, 128 heads, head dim 128; Qwen2.5: vocabulary 151936).
inline constexpr std::int64_t kMaxVocabSize = std::int64_t{1} << 22;
inline constexpr std::int64_t kMaxHiddenSize = std::int64_t{1} << 16;
inline constexpr std::int64_t kMaxIntermediateSize = std::int64_t{1} << 18;
inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxHeads = 1024;  // query heads and KV heads
inline constexpr std::int64_t kMaxHeadDim = 1024;
// Positions are 32-bit in the step descriptor; 2^24 is 128 times the longest context in use.
inline constexpr std::int64_t kMaxPositions = std::int64_t{1} << 24;

// Serving. A decode bucket larger than kMaxBatch no longer gains throughput from the skinny-GEMM
// path while its arena and graph grow without use.
inline constexpr std::int64_t kMaxBatch = 1024;
// A KV page holds a power of two of positions, at most kMaxKvPageSize (the largest page tile of
// the kernels); telosc writes pages of at least kMinKvPageSize (their smallest), the CPU engine
// runs any.
inline constexpr std::int64_t kMinKvPageSize = 8;
inline constexpr std::int64_t kMaxKvPageSize = 256;
// KV pages of a pool fixed by count. Page ids are 32-bit in the page tables; 2^24 pages of the
// smallest page (8 positions) is 2^27 positions, more than any device holds for any real model
// (the 1B shape's 16-position page is 512 KiB: 2^24 of them would be 8 TiB). The host keeps 8
// bytes a page of bookkeeping, at most 128 MiB.
inline constexpr std::int64_t kMaxKvPoolPages = std::int64_t{1} << 24;

// weights.bin: every tensor starts at a multiple of this (the TMA and vector loads' alignment).
inline constexpr std::int64_t kWeightAlignment = 256;

// manifest.json. The 8B shape's manifest, kernels and launch programs included, is about 1 MiB;
// a file beyond kMaxManifestBytes is refused before it is read, a document nested deeper than
// kMaxManifestDepth while it is parsed (the manifest's deepest value is six levels down).
inline constexpr std::int64_t kMaxManifestBytes = std::int64_t{64} << 20;
inline constexpr int kMaxManifestDepth = 32;
// Files an artifact lists (weights, IR, tokenizer files, kernels: about ten).
inline constexpr std::int64_t kMaxArtifactFiles = 256;

// The manifest's graph (the optimized IR the CPU reference engine runs). A fused layer is 8 ops and
// the 405B shape's 126 layers about a thousand; an op has at most four operands, parameters or
// results and about ten attributes, a value one or two dimensions.
inline constexpr std::int64_t kMaxGraphOps = 1 << 16;
inline constexpr std::int64_t kMaxOpEntries = 32;  // an op's operands, params, attrs, results each
inline constexpr std::int64_t kMaxValueRank = 4;
// A value's constant dimension: the widest a model forms is the vocabulary, or the QKV
// projection's (Hq + 2 Hkv) D, below 2^22 within the bounds above.
inline constexpr std::int64_t kMaxValueDim = kMaxVocabSize;

// Launch programs (manifest "kernels" and "programs"), as the GPU engine reads them. The CUDA
// limits of sm_90 and sm_100: 1024 threads a block, 227 KiB of dynamic shared memory a block,
// grid y and z below 2^16, grid x below 2^31.
inline constexpr std::int64_t kMaxBlockThreads = 1024;
inline constexpr std::int64_t kMaxDynamicSmem = 227 * 1024;
inline constexpr std::int64_t kMaxGridX = (std::int64_t{1} << 31) - 1;
inline constexpr std::int64_t kMaxGridYZ = 65535;
// Kernels, buckets' launches, arena buffers and launch arguments: each a few hundred at most in
// the 8B shape's programs.
inline constexpr std::int64_t kMaxProgramEntries = 1 << 16;
// One arena buffer or the whole arena: more device memory than any GPU has (1 TiB).
inline constexpr std::int64_t kMaxDeviceBytes = std::int64_t{1} << 40;

}  // namespace telos::limits
