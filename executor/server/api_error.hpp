#pragma once
// An error answered to an HTTP client, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
// Handlers throw it; the server turns it into the response. `param` names the request field at
// fault ("" when none), so SDKs and people see which field to fix.
//
// Messages quote what the client sent (a path, a model name, a JSON parser's snippet of the body),
// so every message is cut to kMaxErrorMessageBytes here, in the one place all of them pass: no
// error echoes more than a bounded prefix of its input, however large the input.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace telos::exec {

inline constexpr std::size_t kMaxErrorMessageBytes = 512;

// `message`, or its first kMaxErrorMessageBytes at a UTF-8 character boundary and a mark.
inline std::string bounded_error_message(std::string message) {
  if (message.size() <= kMaxErrorMessageBytes) return message;
  std::size_t cut = kMaxErrorMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  message.resize(cut);
  return message + "... (cut at " + std::to_string(kMaxErrorMessageBytes) + " bytes)";
}

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(bounded_error_message(message)),
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
