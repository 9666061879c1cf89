// Reading a JSON object from a file, and the errors of a missing or mistyped field (see json_file.h).
#include "eagle/util/json_file.h"

#include <fstream>

#include "eagle/util/fs_sync.h"

namespace eagle::util {

nlohmann::json read_json_object(const std::filesystem::path& path, std::string_view what, std::string_view hint,
                                std::string_view malformed_hint) {
  const std::string name(what), file = path.string();
  // Before opening: a FIFO would block the open forever.
  require_regular_file(path, ErrorKind::input, "the " + name);
  std::ifstream in(path);
  EAGLE_CHECK(in.good(), Error(ErrorKind::input, "cannot read the " + name).file(file).hint(std::string(hint)));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
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
