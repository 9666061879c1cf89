// The MTP head's config, weights, checkpoint and target-folder export (see mtp_io.h).
#include "eagle/head/mtp_io.h"

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "eagle/head/mtp_head.h"
#include "eagle/head/mtp_layout.h"
#include "eagle/head/mtp_tensors.h"
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

// The config field that counts a family's MTP layers.
const char* mtp_layers_field(target::Family f) {
  using target::Family;
  return f == Family::mimo || f == Family::qwen3_next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers";
}

// Qwen3.5 architectures (text and multimodal, dense and MoE) and Qwen3-Next's.
bool qwen_hybrid_architecture(const std::string& arch) {
  return arch == "Qwen3_5ForCausalLM" || arch == "Qwen3_5ForConditionalGeneration" || arch == "Qwen3_5MoeForCausalLM" ||
         arch == "Qwen3_5MoeForConditionalGeneration" || arch == "Qwen3NextForCausalLM";
}

}  // namespace

std::string mtp_native_name(const std::string& parameter, const std::string& family) {
  return mtp_native_name(mtp_layout(family), parameter);
}

HeadConfig mtp_config_from_target(const target::TargetConfig& t) {
  using target::Family;
  const bool ships = t.num_mtp_layers >= 1;
  const bool qwen = t.family == Family::qwen3_5 || t.family == Family::qwen3_5_moe || t.family == Family::qwen3_next;
  EAGLE_CHECK(ships && (t.family == Family::mimo || qwen),
              Error(ErrorKind::usage, "the target ships no MTP layer for --draft mtp")
                  .place("draft")
                  .expected("a MiMoForCausalLM target with num_nextn_predict_layers >= 1, a Qwen3.5 or Qwen3.5-MoE "
                            "one with mtp_num_hidden_layers >= 1, or a Qwen3NextForCausalLM")
                  .found(fmt::format("{} with {} MTP layers", t.architecture, t.num_mtp_layers))
                  .hint("--draft eagle trains a new head for any target"));
  // vLLM's Qwen3NextDecoderLayer makes its MLP a mixture of experts by its layer index (0 in mtp.layers.0) as the
  // target's layers (mlp_only_layers, decoder_sparse_step): Qwen3-Next's released models have experts everywhere;
  // a dense MTP layer is not what every vLLM build serves, so it is refused by name.
  EAGLE_CHECK(t.family != Family::qwen3_next || t.sparse(0),
              Error(ErrorKind::usage, "--draft mtp does not train a dense Qwen3-Next MTP layer")
                  .place("decoder_sparse_step, mlp_only_layers")
                  .expected("layer index 0 a mixture of experts (decoder_sparse_step 1, 0 not in mlp_only_layers)")
                  .found(fmt::format("{}: layer 0 dense", t.architecture))
                  .hint("--draft eagle trains a new head for any target"));
  // vLLM drafts k > 1 tokens with several MTP layers through MultiModuleMTPSpeculator, whose rules
  // differ (MTP.md 8); MiMo-7B and the Qwen3.5 models ship one layer.
  EAGLE_CHECK(t.num_mtp_layers == 1, Error(ErrorKind::usage, "--draft mtp trains a target with one MTP layer")
                                         .place(mtp_layers_field(t.family))
                                         .expected("1")
                                         .found(std::to_string(t.num_mtp_layers)));
  const auto& l = mtp_layout(t.family == Family::mimo          ? "mimo"
                             : t.family == Family::qwen3_5     ? "qwen3_5"
                             : t.family == Family::qwen3_5_moe ? "qwen3_5_moe"
                                                               : "qwen3_next");
  // Qwen3.5's attention_bias puts a bias on o_proj as well, which the head's layer does not have.
  EAGLE_CHECK(l.attention_bias || !t.attention_bias,
              Error(ErrorKind::usage, "--draft mtp does not train a Qwen3.5 MTP layer with attention biases")
                  .place("attention_bias")
                  .expected("false")
                  .found("true"));
  auto c = HeadConfig::from_target(t, 3, {t.num_hidden_layers}, t.vocab_size);
  c.mtp_family = l.family;
  c.attention_bias = l.attention_bias && t.attention_bias;
  c.qk_norm = l.qk_norm;
  c.norm_one_plus = l.norm_one_plus;
  c.attn_output_gate = l.attn_output_gate;
  if (l.partial_rope) c.rope = t.rope;  // its rotary width: the first head_dim * partial_rotary_factor features
  c.num_layers = 1;
  c.draft_vocab_size = t.vocab_size;
  c.ttt_steps = t.num_mtp_layers;  // vLLM's default k: n_predict (MTP.md 1)
  if (t.family == Family::qwen3_5_moe || t.family == Family::qwen3_next) {
    // The block's MLP: a Qwen3NextSparseMoeBlock with the target's router (softmax top k; Qwen3.5-MoE always
    // renormalised), its experts' width and the gated shared expert (vLLM's qwen3_next.py, qwen3_5.py).
    c.moe_router = t.moe_router();
    c.moe_intermediate_size = t.moe_intermediate_size;
    c.shared_intermediate_size = t.shared_intermediate_size;
    c.shared_expert_gate = t.shared_expert_gate;
  }
  return c;
}

bool is_mtp_config(const json& j) {
  const auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) return false;
  const auto name = (*arch)[0].get<std::string>();
  if (name == "MiMoForCausalLM") return true;
  if (!qwen_hybrid_architecture(name)) return false;
  const auto text = j.find("text_config");
  const json& r = text != j.end() && text->is_object() ? *text : j;
  const bool next = name == "Qwen3NextForCausalLM";
  const char* key = next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers";
  const auto v = r.find(key);
  if (v == r.end()) return next;  // Qwen3-Next: vLLM's default 1
  return v->is_number_integer() && v->get<std::int64_t>() >= 1;
}

HeadConfig mtp_config_from_json(const json& j, const std::string& file) {
  auto c = mtp_config_from_target(target::TargetConfig::from_json_file(file));
  if (!j.contains("eagle_train")) return c;
  const auto& e = j["eagle_train"];
  auto bad = [&](const char* key) {
    return Error(ErrorKind::input, "an eagle_train field of the MTP head is out of range")
        .file(file)
        .place(fmt::format("eagle_train.{}", key))
        .found(e.contains(key) ? e[key].dump() : "missing");
  };
  EAGLE_CHECK(e.is_object() && e.value("mtp_family", "") == c.mtp_family, bad("mtp_family"));
  EAGLE_CHECK(e.contains("ttt_steps") && e["ttt_steps"].is_number_integer() &&
                  e["ttt_steps"].get<std::int64_t>() >= 1 && e["ttt_steps"].get<std::int64_t>() <= 32,
              bad("ttt_steps"));
  c.ttt_steps = e["ttt_steps"].get<std::int64_t>();
  EAGLE_CHECK(e.contains("ttt_loss_decay") && e["ttt_loss_decay"].is_number() &&
                  e["ttt_loss_decay"].get<double>() >= 0.0 && e["ttt_loss_decay"].get<double>() <= 1.0,
              bad("ttt_loss_decay"));
  c.ttt_loss_decay = e["ttt_loss_decay"].get<double>();
  c.target_name_or_path = e.value("target_name_or_path", "");
  // A checkpoint's config.json is a text model's: the target's own architecture (a multimodal
  // Qwen3_5ForConditionalGeneration) is recorded beside it.
  if (e.contains("target_architecture") && e["target_architecture"].is_string())
    c.target_architecture = e["target_architecture"].get<std::string>();
  return c;
}

json mtp_config_json(const HeadConfig& c) {
  EAGLE_CHECK(c.rope.type == "default",
              Error(ErrorKind::usage, "the MTP checkpoint writes default RoPE only").found(c.rope.type));
  const json eagle_train = {{"mtp_family", c.mtp_family},
                            {"ttt_steps", c.ttt_steps},
                            {"ttt_loss_decay", c.ttt_loss_decay},
                            {"target_name_or_path", c.target_name_or_path},
                            {"target_architecture", c.target_architecture},
                            {"target_dtype", c.target_dtype}};
  if (c.mtp_family != "mimo") {
    // A text config of the family (Qwen3_5TextConfig's, Qwen3_5MoeTextConfig's or Qwen3NextConfig's fields) that
    // the target reader reads back into this head's config.
    const bool next = c.mtp_family == "qwen3_next", moe = c.mtp_family != "qwen3_5";
    json j = {{"architectures",
               {next  ? "Qwen3NextForCausalLM"
                : moe ? "Qwen3_5MoeForCausalLM"
                      : "Qwen3_5ForCausalLM"}},
              {"model_type", next  ? "qwen3_next"
                             : moe ? "qwen3_5_moe_text"
                                   : "qwen3_5_text"},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads},
              {"head_dim", c.head_dim},
              {"num_hidden_layers", c.target_num_hidden_layers},
              {next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers", 1},
              {"rms_norm_eps", c.rms_norm_eps},
              {"hidden_act", c.hidden_act},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rope_parameters",
               {{"rope_type", "default"},
                {"rope_theta", c.rope.theta},
                {"partial_rotary_factor", static_cast<double>(c.rope.head_dim) / static_cast<double>(c.head_dim)}}},
              {"attention_bias", false},
              {"vocab_size", c.vocab_size},
              {"tie_word_embeddings", false},
              {"dtype", c.target_dtype},
              {"eagle_train", eagle_train}};
    if (moe) {
      j["num_experts"] = c.moe_router.num_experts;
      j["num_experts_per_tok"] = c.moe_router.experts_per_token;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["shared_expert_intermediate_size"] = c.shared_intermediate_size;
    }
    if (next) {
      j["norm_topk_prob"] = c.moe_router.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = json::array();
    }
    return j;
  }
  return {{"architectures", {"MiMoForCausalLM"}},
          {"model_type", "mimo"},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"num_hidden_layers", c.target_num_hidden_layers},
          {"num_nextn_predict_layers", 1},
          {"rms_norm_eps", c.rms_norm_eps},
          {"hidden_act", c.hidden_act},
          {"max_position_embeddings", c.max_position_embeddings},
          {"rope_theta", c.rope.theta},
          {"vocab_size", c.vocab_size},
          {"tie_word_embeddings", false},
          {"use_sliding_window", false},
          {"torch_dtype", c.target_dtype},
          {"eagle_train", eagle_train}};
}

void load_mtp_weights(DraftHead& head, const std::string& dir) {
  const auto& layout = mtp_layout(head.config().mtp_family);
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
  const std::string replaced =
      layout.replaced_by_target.empty() ? std::string() : layout.prefix + layout.replaced_by_target;
  for (const auto& [name, file] : files) {
    EAGLE_CHECK(!head.config().moe() || name.rfind(extra, 0) != 0,
                Error(ErrorKind::input, "the MTP layer holds more experts than the config's num_experts")
                    .file((fs::path(dir) / file).string())
                    .place(fmt::format("tensor {}", name))
                    .expected(fmt::format("experts 0..{}", experts - 1)));
    EAGLE_CHECK(
        name.rfind(layout.prefix, 0) != 0 || read.count(name) || name == replaced,
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
  const auto& layout = mtp_layout(head.config().mtp_family);
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
