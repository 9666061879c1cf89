// eagle-train eval: the acceptance evaluation of the trainer, standalone, on a checkpoint or a head
// exported here or elsewhere (SGLang/SpecForge, speculators, vLLM EAGLE-1 layouts).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "eagle/cli/commands.h"
#include "eagle/io/log.h"
#include "eagle/io/step_stats.h"
#include "eagle/model/head_io.h"
#include "eagle/train/evaluate.h"
#include "eagle/train/session.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"

namespace eagle::cli {
namespace {

// The head must read this target: same hidden size and vocabulary, aux layers inside the target.
void check_compatible(const model::HeadConfig& h, const model::TargetConfig& t, const std::string& head_dir) {
  auto mismatch = [&](const char* field, std::int64_t head_value, std::int64_t target_value) {
    return Error(ErrorKind::input, "the head was trained for another target").file(head_dir + "/config.json")
        .place(field).expected(fmt::format("{} (the target's)", target_value)).found(std::to_string(head_value));
  };
  EAGLE_CHECK(h.target_hidden_size == t.hidden_size, mismatch("target_hidden_size", h.target_hidden_size, t.hidden_size));
  EAGLE_CHECK(h.vocab_size == t.vocab_size, mismatch("vocab_size", h.vocab_size, t.vocab_size));
  for (auto id : h.aux_layer_ids)
    EAGLE_CHECK(id >= 0 && id <= t.num_hidden_layers, mismatch("eagle_aux_hidden_state_layer_ids", id, t.num_hidden_layers));
}

}  // namespace

void run_eval(const config::Options& opts) {
  EAGLE_CHECK(!opts.checkpoint.empty(), Error(ErrorKind::usage, "eval needs the head to evaluate").place("--checkpoint")
                                            .hint("a checkpoint folder of a run or an exported head folder"));
  train::configure_runtime(opts);
  const torch::Device device = train::resolve_device(opts.device);
  auto target = train::load_target(opts, device);
  auto loaded = model::load_head(opts.checkpoint, device);
  check_compatible(loaded.config, target.config(), opts.checkpoint);
  auto& head = *loaded.head;
  head.module().to(device);
  head.set_target_weights(target.embedding_weight(), target.lm_head_weight());
  // The layers the head was trained on decide the target features it reads.
  if (loaded.config.eagle_version == 3) target.set_aux_layer_ids(loaded.config.aux_layer_ids);

  data::LoadOptions lo{opts.training_seq_len, opts.bad_sample_policy, opts.overlong_policy, 0.0,
                       static_cast<std::uint64_t>(opts.seed)};
  const std::string& path = opts.eval_data_path.empty() ? opts.data_path : opts.eval_data_path;
  EAGLE_CHECK(!path.empty(), Error(ErrorKind::usage, "eval needs held-out data").place("--eval_data_path")
                                 .hint("or --data_path of a prepared dataset with a validation split"));
  auto loaded_data = data::load_dataset(path, lo);
  const data::Dataset& heldout =
      (opts.eval_data_path.empty() && loaded_data.validation) ? *loaded_data.validation : loaded_data.train;
  train::check_vocabulary(heldout, target);

  train::EvalSettings settings{data::SamplerOptions::from(opts), 64, opts.eval_num_prompts, opts.eval_max_new_tokens,
                               opts.eval_draft_len > 0 ? opts.eval_draft_len : loaded.config.ttt_steps, opts.bf16};
  settings.batching.group_by_length = false;
  auto stats = train::evaluate(target, head, train::teacher_spec(head, device), heldout, settings, 0);

  nlohmann::json j = io::to_json(stats);
  j.erase("step");
  j["checkpoint"] = opts.checkpoint;
  j["format"] = model::format_name(loaded.format);
  j["heldout_samples"] = heldout.size();
  j["draft_len"] = settings.draft_len;
  if (opts.json) std::cout << j.dump(2) << "\n";
  else
    std::cout << fmt::format("AR {} | eval loss {:.4f} | acc {:.3f} | tau {:.3f} ({} held-out samples, {} drafted per round)\n",
                             stats.ar ? fmt::format("{:.3f}", *stats.ar) : std::string("n/a"), stats.loss,
                             fmt::join(stats.acc, " "), stats.tau, heldout.size(), settings.draft_len);
  if (!opts.output.empty()) util::write_file_atomic(opts.output, j.dump(2) + "\n");
  if (opts.min_ar > 0 && (!stats.ar || *stats.ar < opts.min_ar))
    throw Error(ErrorKind::gate, "CI gate missed").place("min_ar").expected(fmt::format(">= {}", opts.min_ar))
        .found(stats.ar ? fmt::format("AR {:.3f}", *stats.ar) : "no AR measured");
}

}  // namespace eagle::cli
