#pragma once
// The kernel table, the activation arena and the launch programs of a manifest (docs/artifact.md,
// "plan" and "Kernels"), parsed once into typed form and validated as the GPU engine reads them:
// every size within the CUDA limits and artifact_limits.hpp, every kernel index, weight, buffer,
// descriptor field, KV layer, tensor map and slot image within what the artifact holds. Part of
// validate_manifest (artifact_format.hpp).
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/launch_args.hpp"
#include "support/manifest_fields.hpp"

namespace telos {

struct ArtifactManifest;

// One kernel of the table: its lowered entry name in kernels/<arch>.cubin.
struct KernelEntry {
  std::string entry, instance;
  std::array<unsigned, 3> block{1, 1, 1};
  int dynamic_smem = 0;
};

// A field of the step descriptor (docs/artifact.md, "descriptor field").
enum class DescriptorField {
  tokens,
  positions,
  token_seq,
  split_positions,
  prompt_positions,
  sample_rows,
  sample_params,
  page_tables
};

// What a launch argument names, by the prefix the manifest writes it with.
enum class ArgKind {
  null,          // null
  host_sampled,  // host:sampled, the step's pinned tokens
  weight,        // w:NAME
  buffer,        // buf:NAME, an arena buffer
  kv_layer,      // kv:L
  descriptor,    // desc:FIELD
  tensor_map,    // tmap:TARGET:ROWS:COLS:BOX_ROWS:BOX_COLS
  weight_image,  // wimg:NAME:BN:HALVES
  image_map,     // timg:NAME:BN:HALVES:BOX
  peer_buffer,   // peer:NAME, arena buffer NAME of every tensor-parallel rank (peer pointers)
  rank           // rank, the tensor-parallel rank's index
};

struct LaunchArg {
  ArgKind kind = ArgKind::null;
  std::string text;  // as the manifest writes it: one tensor map or slot image per distinct text
  std::string name;  // weight (also a tensor map's, a slot image's), buffer
  int layer = 0;     // kv_layer, and a tensor map over kv:L
  DescriptorField field = DescriptorField::tokens;
  TensorMapArg map;                    // tensor_map
  ArgKind map_target = ArgKind::null;  // tensor_map: over a weight, a buffer or a KV layer
  WeightImageArg image;                // weight_image, image_map
  // Descriptor fields and host:sampled have one copy per step parity (docs/artifact.md, "Step
  // parity"); everything else one.
  bool per_parity() const { return kind == ArgKind::descriptor || kind == ArgKind::host_sampled; }
};

// A collective of the ranks' NCCL communicators (docs/artifact.md, "Collectives").
enum class Collective {
  none,        // a kernel launch
  all_gather,  // every rank's `count` f32 at `send`, in rank order, into each rank's `recv`
};

// Which engines run a launch of a bucket: every one, or, after a collective entry, those that run
// the collective (its `then`) or those that do not (its `fallback`).
enum class LaunchPath { always, with_collective, without_collective };

// A kernel launch, or a collective entry. A bucket's launches are flat: a collective entry is
// followed by its `then` launches (LaunchPath::with_collective), then its `fallback` launches
// (without_collective); an engine runs the one or the other.
struct ProgramLaunch {
  int kernel = 0;
  std::array<unsigned, 3> grid{1, 1, 1};
  std::vector<LaunchArg> args;
  Collective collective = Collective::none;
  LaunchArg send, recv;    // arena buffers (buf:NAME)
  std::int64_t count = 0;  // f32 elements a rank
  LaunchPath path = LaunchPath::always;
};

struct ProgramBucket {
  bool decode = false;  // kind "decode", else "prefill"
  int size = 0, tokens = 0, sample_rows = 0;
  std::vector<ProgramLaunch> launches;
  std::string name() const;  // "decode:8"
};

// A buffer of the activation arena: its place in the arena (plan.arena).
struct ArenaSlot {
  std::string buffer;
  std::int64_t offset = 0, bytes = 0;
};

struct LaunchPrograms {
  std::string target;  // the architecture of its kernels/<target>.cubin: "sm_90a", "sm_100a"
  std::vector<KernelEntry> kernels;
  int max_tokens = 0, max_sample_rows = 0;  // the step descriptor's rows
  std::int64_t arena_bytes = 0;
  std::vector<ArenaSlot> arena;
  std::vector<ProgramBucket> buckets;  // manifest order: decode largest first, then prefill
};

// Throws telos::Error naming the first field at fault. `artifact` holds the configuration and
// weight table, already validated.
LaunchPrograms read_launch_programs(const ManifestFields& f, const nlohmann::json& kernels,
                                    const nlohmann::json& plan, const nlohmann::json& programs,
                                    const ArtifactManifest& artifact);

// Every kernel set of a manifest with kernels (docs/artifact.md, "Kernel sets"), one a target of
// serving.targets in its order: the top-level plan, kernels and programs for the first target,
// kernel_sets.ARCH for each further one. Throws telos::Error naming the field at fault (a set's
// own fields after "kernel_sets.ARCH: "), a target without a set and a set for no target.
std::vector<LaunchPrograms> read_kernel_sets(const ManifestFields& f,
                                             const nlohmann::json& manifest,
                                             const ArtifactManifest& artifact);

// The kernel target that runs on a GPU of compute capability major.minor: "sm_90a" on 9.0,
// "sm_100a" on 10.0; "" for any other (architecture-specific code runs on exactly its compute
// capability: an sm_100a cubin does not load on 10.3).
std::string kernel_target_for_device(int major, int minor);

// Which of an artifact's kernel sets (`targets`, serving.targets' order) runs on a GPU of compute
// capability major.minor. Throws telos::Error naming `where` (the manifest), the device, the sets
// the artifact has and the --target to compile with, when none does.
std::size_t kernel_set_for_device(int major, int minor, const std::vector<std::string>& targets,
                                  const std::string& where);

}  // namespace telos
