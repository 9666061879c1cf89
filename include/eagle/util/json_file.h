// Reading JSON files the one way: a regular file holding one JSON object, every failure an
// Error(input) naming the file; and the typed read of one field of it.
#pragma once

#include <filesystem>
#include <istream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "eagle/util/error.h"

namespace eagle::util {

// The JSON object in `path`. `what` names the file in the errors ("model config": "the model config
// not found", "cannot read the model config", "model config is not valid JSON", "model config is not
// a JSON object"). `hint` goes with the "cannot read" error, `malformed_hint` with the last two.
nlohmann::json read_json_object(const std::filesystem::path& path, std::string_view what, std::string_view hint = {},
                                std::string_view malformed_hint = {});

// The JSON of `in`, with a key given twice in one object refused as Error(kind, message) naming `file` and the
// key (parsers keep one of the two silently: nlohmann and Python the last). Malformed JSON throws nlohmann's
// parse error, which the caller words.
nlohmann::json parse_json_unique_keys(std::istream& in, ErrorKind kind, const std::string& message,
                                      const std::string& file);

// The errors of json_field: `key` is absent, or of another type than asked (`why`: the parser's text).
Error json_field_missing(std::string_view key, const std::string& file);
Error json_field_wrong_type(std::string_view key, const std::string& file, const char* why);

// j[key] as a T; Error(input) naming the file and the field when it is missing or of another type.
template <typename T>
T json_field(const nlohmann::json& j, std::string_view key, const std::string& file) {
  const auto it = j.find(std::string(key));
  if (it == j.end()) throw json_field_missing(key, file);
  try {
    return it->template get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw json_field_wrong_type(key, file, e.what());
  }
}

// The same for an optional field: `fallback` when absent.
template <typename T>
T json_field_or(const nlohmann::json& j, std::string_view key, T fallback, const std::string& file) {
  return j.contains(std::string(key)) ? json_field<T>(j, key, file) : fallback;
}

}  // namespace eagle::util
