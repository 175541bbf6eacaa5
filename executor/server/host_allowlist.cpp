#include "executor/server/host_allowlist.hpp"

#include <arpa/inet.h>

#include <algorithm>

namespace telos::exec {
namespace {

std::string normalized(std::string_view name) {
  std::string out(name);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool is_port(std::string_view s) {
  return !s.empty() && s.size() <= 5 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_address(int family, std::string_view text) {
  unsigned char buf[16];
  return inet_pton(family, std::string(text).c_str(), buf) == 1;
}

}  // namespace

HostAllowlist::HostAllowlist(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (n == "*") any_ = true;
    names_.push_back(normalized(n));
  }
}

bool HostAllowlist::allows(std::string_view host) const {
  if (any_) return true;
  if (!host.empty() && host.front() == '[') {
    const std::size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view after = host.substr(close + 1);
    return is_address(AF_INET6, host.substr(1, close - 1)) &&
           (after.empty() || (after.front() == ':' && is_port(after.substr(1))));
  }
  const std::size_t colon = host.rfind(':');
  if (colon != std::string_view::npos) {
    if (!is_port(host.substr(colon + 1))) return false;
    host = host.substr(0, colon);
  }
  if (host.empty()) return false;
  if (is_address(AF_INET, host)) return true;
  const std::string name = normalized(host);
  return name == "localhost" || std::find(names_.begin(), names_.end(), name) != names_.end();
}

}  // namespace telos::exec
