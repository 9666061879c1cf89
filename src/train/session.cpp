// Shared set-up of train and eval (see session.h).
#include "eagle/train/session.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <thread>

#include "eagle/io/log.h"
#include "eagle/model/draft_vocab.h"
#include "eagle/model/eagle3_head.h"
#include "eagle/model/head_io.h"
#include "eagle/util/error.h"

namespace eagle::train {

torch::Device resolve_device(const std::string& device) {
  if (device == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (device == "cpu") return torch::kCPU;
  EAGLE_CHECK(torch::cuda::is_available(),
              Error(ErrorKind::config, "no CUDA device is available").place("--device").found(device)
                  .hint("use --device cpu or auto"));
  if (device == "cuda") return torch::Device(torch::kCUDA, 0);
  auto index = std::stoi(device.substr(5));
  EAGLE_CHECK(index < static_cast<int>(torch::cuda::device_count()),
              Error(ErrorKind::config, "no such CUDA device").place("--device").found(device)
                  .expected(fmt::format("cuda:0 .. cuda:{}", torch::cuda::device_count() - 1)));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void configure_runtime(const config::Options& opts) {
  auto threads = opts.num_threads > 0 ? opts.num_threads : static_cast<std::int64_t>(std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(std::max<std::int64_t>(1, threads)));
  torch::manual_seed(static_cast<std::uint64_t>(opts.seed));
  log::debug("train", "intra-op threads: {}, seed: {}", torch::get_num_threads(), opts.seed);
}

torch::ScalarType target_dtype(config::TargetDtype d) {
  switch (d) {
    case config::TargetDtype::float32: return torch::kFloat32;
    case config::TargetDtype::bfloat16: return torch::kBFloat16;
    case config::TargetDtype::float16: return torch::kFloat16;
    case config::TargetDtype::auto_: break;
  }
  return torch::ScalarType::Undefined;
}

SessionData load_session_data(const config::Options& opts) {
  EAGLE_CHECK(!opts.data_path.empty(), Error(ErrorKind::config, "no training data given").place("--data_path")
                                           .hint("a prepared dataset folder or a .jsonl/.json file"));
  data::LoadOptions lo{opts.training_seq_len, opts.bad_sample_policy, opts.overlong_policy,
                       opts.validation_fraction, static_cast<std::uint64_t>(opts.seed)};
  auto loaded = data::load_dataset(opts.data_path, lo);
  SessionData out{std::move(loaded.train), std::move(loaded.validation)};
  if (!opts.eval_data_path.empty()) {
    lo.validation_fraction = 0;
    out.heldout = data::load_dataset(opts.eval_data_path, lo).train;
  }
  EAGLE_CHECK(out.train.size() > 0, Error(ErrorKind::input, "the training data holds no usable sample").file(opts.data_path));
  log::info("data", "training samples: {} ({} tokens, {} trained); held-out samples: {}", out.train.size(),
            out.train.stats().tokens, out.train.stats().trained_tokens, out.heldout ? out.heldout->size() : 0);
  return out;
}

model::TargetModel load_target(const config::Options& opts, torch::Device device) {
  EAGLE_CHECK(!opts.model_name_or_path.empty(),
              Error(ErrorKind::config, "no target model given").place("--model_name_or_path")
                  .hint("a Hugging Face model folder with config.json and *.safetensors"));
  auto target = model::TargetModel::load(opts.model_name_or_path, target_dtype(opts.target_dtype), device);
  if (!opts.aux_hidden_state_layer_ids.empty()) target.set_aux_layer_ids(opts.aux_hidden_state_layer_ids);
  const auto& c = target.config();
  log::info("model", "target {}: {} layers, hidden {}, vocabulary {}, {} parameters, aux layers [{}]", c.architecture,
            c.num_hidden_layers, c.hidden_size, c.vocab_size, target.parameter_count(),
            fmt::join(target.aux_layer_ids(), ", "));
  return target;
}

void check_vocabulary(const data::Dataset& dataset, const model::TargetModel& target) {
  const auto vocab = target.config().vocab_size;
  if (dataset.size() == 0 || static_cast<std::int64_t>(dataset.max_token_id()) < vocab) return;
  for (std::size_t i = 0; i < dataset.size(); ++i)
    for (std::int64_t p = 0; p < dataset.length(i); ++p)
      if (static_cast<std::int64_t>(dataset.token(i, p)) >= vocab)
        throw Error(ErrorKind::input, "token id outside the target's vocabulary").file(dataset.source())
            .place(fmt::format("sample {}, position {}", i, p)).expected(fmt::format("ids < {}", vocab))
            .found(std::to_string(dataset.token(i, p)))
            .hint("the data was tokenized for another model");
}

std::shared_ptr<model::DraftHead> make_head(const config::Options& opts, const model::TargetModel& target,
                                            const data::TokenStats& stats, torch::Device device) {
  const auto& tc = target.config();
  const auto vocab = model::build_draft_vocab(stats, tc.vocab_size, std::min(opts.draft_vocab_size, tc.vocab_size));
  auto cfg = model::HeadConfig::from_target(tc, opts.eagle_version, target.aux_layer_ids(), vocab.size());
  cfg.ttt_steps = opts.ttt_steps;
  cfg.ttt_loss_decay = opts.ttt_loss_decay;
  cfg.target_name_or_path = opts.model_name_or_path;
  cfg.target_architecture = tc.architecture;
  auto head = model::make_head(cfg, vocab);
  head->module().to(device);
  head->set_target_weights(target.embedding_weight(), target.lm_head_weight());
  if (auto* e3 = dynamic_cast<model::Eagle3Head*>(head.get())) {
    e3->init_lm_head_from_target(target.lm_head_weight());
    std::uint64_t covered = 0;
    for (auto id : vocab.draft_ids)
      if (static_cast<std::size_t>(id) < stats.trained_token_counts.size()) covered += stats.trained_token_counts[id];
    log::info("model", "draft vocabulary: {} of {} target ids ({:.1f}% of trained tokens covered)", vocab.size(),
              tc.vocab_size, stats.trained_tokens ? 100.0 * static_cast<double>(covered) / static_cast<double>(stats.trained_tokens) : 0.0);
  }
  return head;
}

model::TeacherSpec teacher_spec(model::DraftHead& head, torch::Device device) {
  model::TeacherSpec spec;
  if (auto* e3 = dynamic_cast<model::Eagle3Head*>(&head)) spec.draft_ids = e3->vocab().ids().to(device);
  return spec;
}

std::vector<std::pair<std::string, torch::Tensor>> named_parameters(model::DraftHead& head) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : head.module().named_parameters(/*recurse=*/true))
    if (p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  return out;
}

std::int64_t count_parameters(model::DraftHead& head) {
  std::int64_t n = 0;
  for (const auto& [name, p] : named_parameters(head)) n += p.numel();
  return n;
}

void copy_weights(model::DraftHead& src, model::DraftHead& dst, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto from_params = src.module().named_parameters(true);
  auto from_buffers = src.module().named_buffers(true);
  auto copy = [&](const std::string& name, torch::Tensor& to, const torch::OrderedDict<std::string, torch::Tensor>& from) {
    const torch::Tensor* t = from.find(name);
    EAGLE_CHECK(t != nullptr, Error(ErrorKind::input, "head weights lack a tensor").file(source).place(name));
    EAGLE_CHECK(t->sizes() == to.sizes(),
                Error(ErrorKind::input, "head tensor has the wrong shape").file(source).place(name)
                    .expected(fmt::format("[{}]", fmt::join(to.sizes(), ", ")))
                    .found(fmt::format("[{}]", fmt::join(t->sizes(), ", "))));
    to.copy_(*t);
  };
  for (auto& p : dst.module().named_parameters(true)) copy(p.key(), p.value(), from_params);
  for (auto& b : dst.module().named_buffers(true)) copy(b.key(), b.value(), from_buffers);
}

model::HeadInputs head_inputs(const model::TargetModel& target, const BatchTensors& b, const model::TeacherSpec& teacher) {
  auto out = target.forward(model::TargetBatch{b.input_ids, b.position_ids, b.document_ids}, teacher);
  model::HeadInputs in;
  in.input_ids = b.input_ids;
  in.loss_mask = b.loss_mask;
  in.position_ids = b.position_ids;
  in.document_ids = b.document_ids;
  in.aux_hidden = out.aux_hidden;
  in.final_hidden = out.final_hidden;
  in.teacher_logits = out.teacher_logits;
  in.target_argmax = out.target_argmax;
  return in;
}

AutocastGuard::AutocastGuard(torch::Device device, bool enabled) : type_(device.type()), enabled_(enabled) {
  previous_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, at::kBFloat16);
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(type_, previous_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
  at::autocast::clear_cache();
}

}  // namespace eagle::train
