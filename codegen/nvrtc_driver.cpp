#include "codegen/nvrtc_driver.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "codegen/compile_cache.hpp"
#include "support/checksum.hpp"
#include "support/error.hpp"

namespace telos::codegen {

const std::map<std::string, std::string>& embedded_kernel_headers();  // generated at build time

namespace {

void check(nvrtcResult r, const std::string& what) {
  if (r != NVRTC_SUCCESS) fail("codegen: NVRTC " + what + ": " + nvrtcGetErrorString(r));
}

std::vector<std::string> compile_options(const std::string& arch) {
  // --no-cache: NVRTC (12.9 on) keeps its own cache of compiled programs where a driver is
  // installed, and a program it finds there comes back without ptxas's report, whose resources
  // the manifest records and whose spills fail the compile; Telos caches by content itself
  // (CompileCache, with the report).
  return {"--gpu-architecture=" + arch, "--std=c++20", "--ptxas-options=-v", "-lineinfo",
          "--no-cache"};
}

std::uint64_t cache_key(const std::string& source, const std::string& arch,
                        const std::vector<std::string>& names) {
  std::string text = "telos-codegen-cache-v1\n" + nvrtc_version() + "\n" + arch + "\n";
  for (const auto& o : compile_options(arch)) text += o + "\n";
  for (const auto& [name, body] : kernel_headers()) text += name + "\n" + body + "\n";
  for (const auto& n : names) text += n + "\n";
  text += source;
  return xxh64(text.data(), text.size());
}

}  // namespace

const std::map<std::string, std::string>& kernel_headers() { return embedded_kernel_headers(); }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "version");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::map<std::string, KernelResources> parse_ptxas_log(const std::string& log) {
  static const std::regex entry_re(R"(Compiling entry function '([^']+)')");
  static const std::regex props_re(R"(Function properties for (\S+))");
  static const std::regex frame_re(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used_re(R"(Used (\d+) registers)");
  static const std::regex smem_re(R"((\d+) bytes smem)");
  std::map<std::string, KernelResources> out;
  std::string entry, props;
  std::istringstream in(log);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, m, entry_re)) {
      entry = m[1];
      out[entry];
    } else if (std::regex_search(line, m, props_re)) {
      props = m[1];
    } else if (std::regex_search(line, m, frame_re)) {
      if (props == entry && !entry.empty()) {
        KernelResources& r = out[entry];
        r.stack_frame = std::stoi(m[1]);
        r.spill_stores = std::stoi(m[2]);
        r.spill_loads = std::stoi(m[3]);
      }
    } else if (std::regex_search(line, m, used_re)) {
      if (!entry.empty()) {
        KernelResources& r = out[entry];
        r.registers = std::stoi(m[1]);
        if (std::regex_search(line, m, smem_re)) r.shared_static = std::stoi(m[1]);
      }
    }
  }
  return out;
}

void check_kernel_resources(const std::string& instance, const std::string& entry,
                            const std::string& arch, const KernelResources& r, int dynamic_smem) {
  if (r.spill_stores || r.spill_loads || r.stack_frame)
    fail("codegen: kernel " + instance + " (" + entry + ") uses local memory on " + arch + ": " +
         std::to_string(r.stack_frame) + " bytes stack frame, " + std::to_string(r.spill_stores) +
         " bytes spill stores, " + std::to_string(r.spill_loads) +
         " bytes spill loads; Telos kernels must not spill");
  if (r.shared_static + dynamic_smem > kMaxSmemPerBlock)
    fail("codegen: kernel " + instance + " (" + entry + ") needs " +
         std::to_string(r.shared_static) + " bytes of static and " + std::to_string(dynamic_smem) +
         " of dynamic shared memory on " + arch + ", more than the " +
         std::to_string(kMaxSmemPerBlock) + " a block may have");
}

CompiledModule compile_module(const std::string& source, const std::string& arch,
                              const std::vector<std::string>& name_expressions,
                              const std::string& cache_dir) {
  const CompileCache cache(cache_dir);
  const std::uint64_t key = cache_key(source, arch, name_expressions);
  if (auto hit = cache.find(key)) {
    auto& files = *hit;
    if (files.count("module.ptx") && files.count("module.cubin") && files.count("log.txt") &&
        files.count("names.json")) {
      CompiledModule m;
      m.ptx = files["module.ptx"];
      m.cubin = files["module.cubin"];
      m.log = files["log.txt"];
      const nlohmann::json names = nlohmann::json::parse(files["names.json"]);
      for (auto it = names.begin(); it != names.end(); ++it) m.lowered[it.key()] = it.value();
      m.resources = parse_ptxas_log(m.log);
      m.from_cache = true;
      return m;
    }
  }

  std::vector<const char*> header_bodies, header_names;
  for (const auto& [name, body] : kernel_headers()) {
    header_names.push_back(name.c_str());
    header_bodies.push_back(body.c_str());
  }
  nvrtcProgram prog = nullptr;
  check(nvrtcCreateProgram(&prog, source.c_str(), "telos_model.cu",
                           static_cast<int>(header_names.size()), header_bodies.data(),
                           header_names.data()),
        "create program");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) {
    nvrtcDestroyProgram(p);
  });
  for (const auto& n : name_expressions) check(nvrtcAddNameExpression(prog, ("&" + n).c_str()), "name " + n);
  const std::vector<std::string> options = compile_options(arch);
  std::vector<const char*> opts;
  for (const auto& o : options) opts.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  CompiledModule m;
  std::size_t n = 0;
  check(nvrtcGetProgramLogSize(prog, &n), "log size");
  m.log.resize(n);
  check(nvrtcGetProgramLog(prog, m.log.data()), "log");
  while (!m.log.empty() && m.log.back() == '\0') m.log.pop_back();
  if (r != NVRTC_SUCCESS)
    fail("codegen: NVRTC could not compile the kernels for " + arch + ":\n" + m.log);
  check(nvrtcGetPTXSize(prog, &n), "PTX size");
  m.ptx.resize(n);
  check(nvrtcGetPTX(prog, m.ptx.data()), "PTX");
  while (!m.ptx.empty() && m.ptx.back() == '\0') m.ptx.pop_back();
  check(nvrtcGetCUBINSize(prog, &n), "cubin size");
  m.cubin.resize(n);
  check(nvrtcGetCUBIN(prog, m.cubin.data()), "cubin");
  nlohmann::json names = nlohmann::json::object();
  for (const auto& e : name_expressions) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(prog, ("&" + e).c_str(), &lowered), "lowered name of " + e);
    m.lowered[e] = lowered;
    names[e] = lowered;
  }
  m.resources = parse_ptxas_log(m.log);
  cache.store(key, {{"module.ptx", m.ptx}, {"module.cubin", m.cubin}, {"log.txt", m.log},
                    {"names.json", names.dump(1)}});
  return m;
}

std::vector<CompiledModule> compile_modules(const std::string& source, const std::string& arch,
                                            const std::vector<std::string>& name_expressions,
                                            const std::string& cache_dir, int parts) {
  const int n = static_cast<int>(name_expressions.size());
  parts = std::clamp(parts, 1, std::max(n, 1));
  std::vector<std::vector<std::string>> groups(parts);
  for (int i = 0; i < n; ++i) groups[i % parts].push_back(name_expressions[i]);
  std::vector<std::future<CompiledModule>> jobs;
  for (const auto& g : groups)
    jobs.push_back(std::async(std::launch::async, [&source, &arch, &cache_dir, &g] {
      return compile_module(source, arch, g, cache_dir);
    }));
  for (auto& j : jobs) j.wait();
  std::vector<CompiledModule> modules;
  for (auto& j : jobs) modules.push_back(j.get());
  return modules;
}

}  // namespace telos::codegen
