#pragma once
// A content-addressed store of compiled modules: one directory per key under the cache root,
// written under a temporary name and published by rename, so concurrent compilers never see a
// half-written entry. The key covers everything that can change the output (generated source,
// every kernel header, NVRTC version, target, options, name expressions).
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace telos::codegen {

class CompileCache {
 public:
  explicit CompileCache(std::string root) : root_(std::move(root)) {}

  // The files of entry `key` (file name -> contents), or nothing when absent. A hit sets the
  // entry directory's modification time to now (where the cache is writable).
  std::optional<std::map<std::string, std::string>> find(std::uint64_t key) const;
  // Publishes entry `key`; an entry that appeared meanwhile wins (same key, same content).
  void store(std::uint64_t key, const std::map<std::string, std::string>& files) const;

  // $TELOS_CACHE_DIR, else $XDG_CACHE_HOME/telos/kernels, else $HOME/.cache/telos/kernels, else
  // "" (no cache).
  static std::string default_root();

 private:
  std::string root_;
};

}  // namespace telos::codegen
