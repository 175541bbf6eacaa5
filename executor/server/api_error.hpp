#pragma once
// An error answered to an HTTP client, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
// Handlers throw it; the server turns it into the response. `param` names the request field at
// fault ("" when none), so SDKs and people see which field to fix.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace telos::exec {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

// 400 invalid_request_error about `param`; the message starts with the field's name.
inline ApiError bad_request(const std::string& param, const std::string& what) {
  return ApiError(400, "invalid_request_error", param.empty() ? what : param + ": " + what, param);
}

inline nlohmann::ordered_json error_body(const ApiError& e) {
  auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s);
  };
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", or_null(e.param)},
            {"code", or_null(e.code)}}}};
}

}  // namespace telos::exec
