// Reading a JSON object from a file, and the errors of a missing or mistyped field (see json_file.h).
#include "eagle/util/json_file.h"

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eagle/util/fs_sync.h"

namespace eagle::util {

nlohmann::json parse_json_unique_keys(std::istream& in, ErrorKind kind, const std::string& message,
                                      const std::string& file) {
  std::vector<std::set<std::string>> seen;  // the keys of each open object
  auto no_duplicates = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    if (event == event_t::object_start) {
      seen.emplace_back();
    } else if (event == event_t::object_end) {
      seen.pop_back();
    } else if (event == event_t::key && !seen.back().insert(parsed.get<std::string>()).second) {
      throw Error(kind, message)
          .file(file)
          .place(fmt::format("key \"{}\"", parsed.get<std::string>()))
          .hint("keep one of them");
    }
    return true;
  };
  return nlohmann::json::parse(in, no_duplicates);
}

nlohmann::json read_json_object(const std::filesystem::path& path, std::string_view what, std::string_view hint,
                                std::string_view malformed_hint) {
  const std::string name(what), file = path.string();
  // Before opening: a FIFO would block the open forever.
  require_regular_file(path, ErrorKind::input, "the " + name);
  std::ifstream in(path);
  EAGLE_CHECK(in.good(), Error(ErrorKind::input, "cannot read the " + name).file(file).hint(std::string(hint)));
  nlohmann::json j;
  try {
    j = parse_json_unique_keys(in, ErrorKind::input, "a key is given twice in the " + name, file);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::input, name + " is not valid JSON")
        .file(file)
        .found(e.what())
        .hint(std::string(malformed_hint));
  }
  EAGLE_CHECK(j.is_object(),
              Error(ErrorKind::input, name + " is not a JSON object").file(file).hint(std::string(malformed_hint)));
  return j;
}

Error json_field_missing(std::string_view key, const std::string& file) {
  return Error(ErrorKind::input, "required field missing").file(file).place("field " + std::string(key));
}

Error json_field_wrong_type(std::string_view key, const std::string& file, const char* why) {
  return Error(ErrorKind::input, "field has the wrong type").file(file).place("field " + std::string(key)).found(why);
}

}  // namespace eagle::util
