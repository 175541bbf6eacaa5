#include "codegen/compile_cache.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <unistd.h>

#include "support/error.hpp"

namespace telos::codegen {
namespace fs = std::filesystem;
namespace {

std::string key_name(std::uint64_t key) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(key));
  return buf;
}

}  // namespace

std::optional<std::map<std::string, std::string>> CompileCache::find(std::uint64_t key) const {
  const fs::path dir = fs::path(root_) / key_name(key);
  std::error_code ec;
  if (root_.empty() || !fs::is_directory(dir, ec)) return std::nullopt;
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    if (!in) return std::nullopt;
    files[e.path().filename().string()] = s.str();
  }
  if (ec) return std::nullopt;
  // A hit marks the entry as used now, so that the entries a run used can be told from the rest
  // (tools/gpu_check.sh carries those to the next GPU machine); a read-only cache stays usable.
  fs::last_write_time(dir, fs::file_time_type::clock::now(), ec);
  return files;
}

void CompileCache::store(std::uint64_t key, const std::map<std::string, std::string>& files) const {
  if (root_.empty()) return;
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) fail("compile cache: cannot create " + root_ + ": " + ec.message());
  const fs::path final_dir = fs::path(root_) / key_name(key);
  const fs::path tmp = fs::path(root_) / (key_name(key) + ".tmp." + std::to_string(getpid()) + "." +
                                          std::to_string(reinterpret_cast<std::uintptr_t>(&files)));
  fs::create_directories(tmp, ec);
  if (ec) fail("compile cache: cannot create " + tmp.string() + ": " + ec.message());
  for (const auto& [name, data] : files) {
    std::ofstream out(tmp / name, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) fail("compile cache: cannot write " + (tmp / name).string());
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) fs::remove_all(tmp, ec);  // another compiler published the same entry first
}

std::string CompileCache::default_root() {
  if (const char* d = std::getenv("TELOS_CACHE_DIR")) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (fs::path(x) / "telos" / "kernels").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (fs::path(h) / ".cache" / "telos" / "kernels").string();
  return "";
}

}  // namespace telos::codegen
