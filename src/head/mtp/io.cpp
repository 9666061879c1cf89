// The MTP head's config, weights, checkpoint and target-folder export (see mtp_io.h).
#include "eagle/head/mtp/io.h"

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "eagle/head/mtp/config.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/layout.h"
#include "eagle/head/mtp/tensors.h"
#include "eagle/model/safetensors.h"
#include "eagle/model/shape_check.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/json_file.h"
#include "eagle/util/log.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::head {

namespace {

// name -> shard file name of a model folder: model.safetensors.index.json's weight_map, else every
// tensor of model.safetensors.
std::map<std::string, std::string> tensor_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  const auto index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const json j = util::read_json_object(index, "safetensors index");
    EAGLE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
                Error(ErrorKind::input, "the safetensors index has no weight_map").file(index.string()));
    for (const auto& [name, file] : j["weight_map"].items()) {
      EAGLE_CHECK(file.is_string() && fs::path(file.get<std::string>()).filename() == file.get<std::string>(),
                  Error(ErrorKind::input, "a weight_map entry is not a file name in the folder")
                      .file(index.string())
                      .place(name)
                      .found(file.dump()));
      out[name] = file.get<std::string>();
    }
    return out;
  }
  const auto single = dir / "model.safetensors";
  for (const auto& name : model::SafetensorsFile::open(single.string()).names()) out[name] = "model.safetensors";
  return out;
}

}  // namespace

std::string mtp_native_name(const std::string& parameter, const std::string& family) {
  return mtp_native_name(mtp_layout(family), parameter);
}

std::string mtp_native_name(const std::string& parameter, const HeadConfig& cfg) {
  return mtp_native_name(mtp_layout(cfg), parameter);
}

void load_mtp_weights(DraftHead& head, const std::string& dir) {
  const auto layout = mtp_layout(head.config());
  const auto files = tensor_files(dir);
  std::map<std::string, model::SafetensorsFile> open;
  std::set<std::string> read;
  torch::NoGradGuard ng;
  for (auto& t : mtp_tensors(head, layout, expert_names_of(layout, files))) {
    const auto& name = t.name;
    read.insert(name);
    const auto it = files.find(name);
    EAGLE_CHECK(it != files.end(), Error(ErrorKind::input, "a tensor of the MTP layer is missing")
                                       .file(dir)
                                       .place(fmt::format("tensor {}", name))
                                       .hint("--draft mtp reads the MTP layer the target folder ships"));
    if (!open.count(it->second))
      open.emplace(it->second, model::SafetensorsFile::open((fs::path(dir) / it->second).string()));
    const auto& file = open.at(it->second);
    auto stored = file.get(name);
    model::check_shape(stored.sizes().vec(), t.value.sizes(),
                       Error(ErrorKind::input, "a tensor of the MTP layer has the wrong shape")
                           .file(file.path())
                           .place(fmt::format("tensor {}", name)));
    t.value.copy_(stored.to(t.value.device(), t.value.scalar_type()));
  }
  // An expert past the config's count is named as such.
  const auto experts = head.config().moe_router.num_experts;
  const auto extra = layout.prefix + layout.block + fmt::format("mlp.experts.{}.", experts);
  // What vLLM loads and then replaces by the target's (the embedding, DeepSeek's shared_head.head): read past.
  std::set<std::string> replaced;
  for (const auto& r : layout.replaced_by_target) replaced.insert(layout.prefix + r);
  // MiMo numbers its MTP layers model.mtp_layers.{i}: one past the config's count (vLLM's multi-module
  // speculator would load it; an export would carry it untrained) is refused by name. Qwen's mtp.layers.{i}
  // fall under the prefix's check below; DeepSeek's and GLM's model.layers.{L + i} under the target
  // checkpoint's layer count.
  const std::string numbered = "model.mtp_layers.";
  const bool mimo_numbering = layout.prefix.rfind(numbered, 0) == 0;
  for (const auto& [name, file] : files) {
    EAGLE_CHECK(!mimo_numbering || name.rfind(numbered, 0) != 0 || name.rfind(layout.prefix, 0) == 0,
                Error(ErrorKind::input, "the folder holds an MTP layer its config.json does not count")
                    .file((fs::path(dir) / file).string())
                    .place(fmt::format("tensor {}", name))
                    .expected(fmt::format("only {}* (num_nextn_predict_layers 1: --draft mtp trains one layer)",
                                          layout.prefix)));
    EAGLE_CHECK(!head.config().moe() || name.rfind(extra, 0) != 0,
                Error(ErrorKind::input, "the MTP layer holds more experts than the config's num_experts")
                    .file((fs::path(dir) / file).string())
                    .place(fmt::format("tensor {}", name))
                    .expected(fmt::format("experts 0..{}", experts - 1)));
    EAGLE_CHECK(
        name.rfind(layout.prefix, 0) != 0 || read.count(name) || replaced.count(name),
        Error(ErrorKind::input, "a tensor of the MTP layer is not part of the head")
            .file((fs::path(dir) / file).string())
            .place(fmt::format("tensor {}", name))
            .hint(fmt::format("the MTP layer differs from the {} layer vLLM serves", layout.architecture_hint)));
  }
}

std::shared_ptr<DraftHead> load_mtp_head(const std::string& dir, torch::Device device) {
  const auto path = (fs::path(dir) / "config.json").string();
  const json j = util::read_json_object(path, "config.json");
  auto head = std::make_shared<MtpHead>(mtp_config_from_json(j, path));
  load_mtp_weights(*head, dir);
  head->module().to(device);
  return head;
}

void export_mtp_target(DraftHead& head, const std::string& target_dir, const std::string& out_dir) {
  const fs::path src(target_dir), out(out_dir);
  EAGLE_CHECK(head.config().mtp(), Error(ErrorKind::usage, "--format mtp exports MTP heads only")
                                       .place("--format")
                                       .hint("an EAGLE head exports as sglang, speculators or vllm-eagle1"));
  EAGLE_CHECK(!fs::exists(out), Error(ErrorKind::output, "the output folder exists; nothing is overwritten")
                                    .file(out_dir)
                                    .hint("choose a new --output folder"));
  EAGLE_CHECK(fs::is_regular_file(src / "config.json"),
              Error(ErrorKind::input, "not a target model folder").file(target_dir).expected("config.json"));
  const json target_config = util::read_json_object(src / "config.json", "target config.json");
  const auto layout = mtp_layout(head.config());
  EAGLE_CHECK(is_mtp_config(target_config), Error(ErrorKind::input, "the target ships no MTP layer")
                                                .file((src / "config.json").string())
                                                .expected(layout.architecture_hint + " with its MTP layer"));
  // The head's tensors by native name, grouped by the shard that holds each in the target.
  const auto files = tensor_files(src);
  std::map<std::string, std::map<std::string, torch::Tensor>> by_shard;
  // The experts as the target holds them, fused or per expert.
  for (const auto& t : mtp_tensors(head, layout, expert_names_of(layout, files))) {
    const auto& name = t.name;
    const auto it = files.find(name);
    EAGLE_CHECK(it != files.end(), Error(ErrorKind::input, "the target folder lacks a tensor of the MTP head")
                                       .file(target_dir)
                                       .place(fmt::format("tensor {}", name))
                                       .hint("export into the target the head was trained from"));
    by_shard[it->second][name] = t.value.detach().to(torch::kCPU);
  }
  const auto tmp = util::temporary_name(out);
  fs::create_directories(tmp);
  std::uintmax_t linked = 0, copied = 0, rewritten = 0;
  try {
    for (const auto& entry : fs::directory_iterator(src)) {
      const auto name = entry.path().filename().string();
      const auto dst = tmp / name;
      if (name == "config.json") {
        json c = target_config;
        c["eagle_train"] = mtp_config_json(head.config())["eagle_train"];
        util::write_file_atomic(dst, c.dump(2) + "\n");
      } else if (by_shard.count(name)) {
        auto file = model::SafetensorsFile::open(entry.path().string());
        std::map<std::string, torch::Tensor> tensors;
        for (const auto& t : file.names()) tensors[t] = file.get(t);
        for (const auto& [t, value] : by_shard.at(name)) {
          model::check_shape(value.sizes().vec(), tensors.at(t).sizes(),
                             Error(ErrorKind::input, "an MTP tensor of the target has another shape")
                                 .file(entry.path().string())
                                 .place(fmt::format("tensor {}", t)));
          tensors[t] = value.to(tensors.at(t).scalar_type()).contiguous();  // the stored dtype
        }
        model::save_safetensors(dst.string(), tensors, file.metadata());
        rewritten += fs::file_size(dst);
      } else if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
        std::error_code ec;
        // Unchanged shard: no disk. To the file itself: a Hugging Face cache snapshot holds relative
        // symlinks into its blobs, which would dangle in another folder.
        fs::create_hard_link(fs::canonical(entry.path()), dst, ec);
        if (ec) {
          fs::copy_file(entry.path(), dst);
          copied += entry.file_size();
        } else {
          linked += entry.file_size();
        }
      } else {
        fs::copy(entry.path(), dst, fs::copy_options::recursive);  // small files, copied (never shared)
      }
    }
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  log::info("export",
            "wrote {} (vLLM: --speculative-config '{{\"method\":\"mtp\",\"num_speculative_tokens\":{}}}'): {} shard(s) "
            "rewritten ({:.1f} MiB), {:.1f} MiB hard-linked, {:.1f} MiB copied",
            out_dir, head.config().ttt_steps, by_shard.size(), static_cast<double>(rewritten) / (1 << 20),
            static_cast<double>(linked) / (1 << 20), static_cast<double>(copied) / (1 << 20));
}

}  // namespace eagle::head
