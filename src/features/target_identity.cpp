// The target's identity recorded by a dump, and its comparison by field and tensor (see
// target_identity.h).
#include "eagle/features/target_identity.h"

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::features {

using nlohmann::json;

json target_identity(const std::string& model_name_or_path, const std::string& weights_dir,
                     const target::TargetConfig& c) {
  return json{{"model_name_or_path", model_name_or_path},
              {"architecture", c.architecture},
              {"num_hidden_layers", c.num_hidden_layers},
              {"hidden_size", c.hidden_size},
              {"vocab_size", c.vocab_size},
              {"tensors", target::tensor_fingerprints(weights_dir)}};
}

void check_same_target(const json& recorded, const json& now, const std::string& manifest_file, bool with_path,
                       const std::string& hint) {
  const std::string given = now.value("model_name_or_path", std::string());
  auto differs = [&](const std::string& place, const json& expected, const json* found) {
    return Error(ErrorKind::usage, "the features were computed by another target")
        .file(manifest_file)
        .place(place)
        .expected(fmt::format("{} ({})", expected.is_string() ? expected.get<std::string>() : expected.dump(), given))
        .found(found == nullptr     ? "none"
               : found->is_string() ? found->get<std::string>()
                                    : found->dump())
        .hint(hint);
  };
  std::vector<const char*> keys = {"architecture", "num_hidden_layers", "hidden_size", "vocab_size"};
  if (with_path) keys.insert(keys.begin(), "model_name_or_path");
  for (const char* key : keys) {
    const json* found = recorded.contains(key) ? &recorded[key] : nullptr;
    EAGLE_CHECK(found != nullptr && *found == now[key], differs(fmt::format("target.{}", key), now[key], found));
  }
  const json none = json::object();
  const json& was = recorded.contains("tensors") && recorded["tensors"].is_object() ? recorded["tensors"] : none;
  const json& is = now.at("tensors");
  for (const auto& [name, value] : is.items()) {
    const json* found = was.contains(name) ? &was[name] : nullptr;
    EAGLE_CHECK(found != nullptr && *found == value, differs(fmt::format("target.tensors \"{}\"", name), value, found));
  }
  for (const auto& [name, value] : was.items())
    EAGLE_CHECK(is.contains(name), differs(fmt::format("target.tensors \"{}\"", name), json("none"), &value));
}

}  // namespace eagle::features
