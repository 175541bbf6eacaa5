#pragma once
// The one error type of Telos. Its message names the file, field or request at fault and what was
// expected; tools print it on one line and exit non-zero. User mistakes never abort or segfault.
#include <stdexcept>
#include <string>

namespace telos {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace telos
