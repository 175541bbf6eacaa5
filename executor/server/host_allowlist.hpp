#pragma once
// Which Host headers `telos-run serve` answers, against DNS rebinding: a web page can make a
// browser on this machine send requests to a local server under a name the page's author controls
// (a name that resolves to 127.0.0.1), and the browser then lets the page read the answers.
// Refusing every name but those the operator expects closes that door. IP literals (IPv4, and IPv6
// in brackets, with or without a port) are always allowed: rebinding needs a name, and a client
// that connects by address sends the address. "localhost" is always allowed, and "*" allows any
// Host. Names are compared without case and without a trailing dot or a port.
#include <string>
#include <string_view>
#include <vector>

namespace telos::exec {

class HostAllowlist {
 public:
  explicit HostAllowlist(const std::vector<std::string>& names);
  // `host` is a Host header's value; malformed values are refused unless "*" is listed.
  bool allows(std::string_view host) const;

 private:
  bool any_ = false;
  std::vector<std::string> names_;  // lower-case, no trailing dot
};

}  // namespace telos::exec
