// Test helpers for the MTP heads (tests/test_head_mtp_*.cpp): a fixture target folder's MTP head with 3
// TTT steps, the head inputs of a reference file written by scripts/make_mtp*_reference.py, and the checks
// every family makes against it (the training step, drafting).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "eagle/head/export/io.h"
#include "eagle/head/loss.h"
#include "eagle/head/mtp/head.h"
#include "eagle/head/mtp/io.h"
#include "eagle/model/safetensors.h"
#include "eagle/target/target.h"

namespace eagle::test {

// A copy at `out` of a fixture folder (config.json, model.safetensors) whose tensors are edited by `edit`.
inline std::filesystem::path edited_mtp_copy(const std::filesystem::path& out, const std::string& folder,
                                             const std::function<void(std::map<std::string, torch::Tensor>&)>& edit) {
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(std::filesystem::path(folder) / "config.json", out / "config.json");
  std::map<std::string, torch::Tensor> copy;
  for (const auto& [name, t] : model::load_safetensors(folder + "/model.safetensors")) copy[name] = t.clone();
  edit(copy);
  model::save_safetensors((out / "model.safetensors").string(), copy);
  return out;
}

// The per-expert base{e}.{gate,up,down}_proj.weight tensors of `experts` experts replaced by transformers 5's
// fused base + gate_up_proj [E, 2 I, H] and base + down_proj [E, H, I] (base: "<prefix>mlp.experts.").
inline void fuse_mtp_experts(std::map<std::string, torch::Tensor>& t, const std::string& base, std::int64_t experts) {
  std::vector<torch::Tensor> gate_up, down;
  for (std::int64_t e = 0; e < experts; ++e) {
    const auto p = base + std::to_string(e) + ".";
    gate_up.push_back(torch::cat({t.at(p + "gate_proj.weight"), t.at(p + "up_proj.weight")}));
    down.push_back(t.at(p + "down_proj.weight"));
    for (const char* n : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) t.erase(p + n);
  }
  t[base + "gate_up_proj"] = torch::stack(gate_up);
  t[base + "down_proj"] = torch::stack(down);
}

// The folder's MTP head re-made with 3 TTT steps (a folder's own default is 1, vLLM's k), its weights read
// from the target folder, the target's embedding and LM head set.
inline std::shared_ptr<head::MtpHead> mtp_three_step_head(const std::string& folder,
                                                          head::RecomputeMode mode = head::RecomputeMode::off,
                                                          std::int64_t chunk = 0) {
  auto cfg = head::read_head_folder_config(folder);
  cfg.ttt_steps = 3;
  cfg.ttt_loss_decay = 0.8;
  cfg.recompute = mode;
  cfg.loss_chunk_size = chunk;
  auto head = std::make_shared<head::MtpHead>(cfg);
  head::load_mtp_weights(*head, folder);
  auto target = target::TargetModel::load_ends(folder, torch::kFloat32, torch::kCPU);
  head->set_target_weights(target.embed, target.lm_head);
  return head;
}

// A target with one MTP layer hands the MTP head its last hidden state (aux id L, after the final norm)
// and its logits as the reference's target computed them; the MTP layer's tensors are in the folder but
// not the target's (loaded without them). A packed row of two samples against each run alone: the
// hybrid targets' measured packed bound 2.5e-4 (test_target_target_linear.cpp).
inline void check_target_last_hidden(const std::string& folder, const std::map<std::string, torch::Tensor>& ref) {
  const auto c = target::TargetConfig::from_model_dir(folder);
  CHECK(c.num_mtp_layers == 1);
  auto model = target::TargetModel::load(folder, torch::kFloat32, torch::kCPU);
  model.set_aux_layer_ids({c.num_hidden_layers});
  target::TargetBatch batch;
  batch.input_ids = ref.at("input_ids");
  batch.position_ids = ref.at("position_ids");
  batch.document_ids = ref.at("document_ids");
  const auto out = model.forward(batch, target::TeacherSpec{torch::arange(c.vocab_size, torch::kInt64)});
  CHECK((out.aux_hidden - ref.at("hidden")).abs().max().item<double>() <= 2.5e-4);
  CHECK((out.teacher_logits - ref.at("target_logits")).abs().max().item<double>() <= 2.5e-4);
}

// The reference's row: ids, positions, documents, the target's hidden state, its logits and argmax, the mask.
inline head::HeadInputs mtp_reference_inputs(const std::map<std::string, torch::Tensor>& ref) {
  head::HeadInputs in;
  in.input_ids = ref.at("input_ids");
  in.position_ids = ref.at("position_ids");
  in.document_ids = ref.at("document_ids");
  in.aux_hidden = ref.at("hidden");
  in.teacher_logits = ref.at("target_logits");
  in.target_argmax = ref.at("target_argmax");
  in.loss_mask = ref.at("loss_mask");
  return in;
}

// The folder's head (3 TTT steps) against a reference file of scripts/make_mtp*_reference.py, with
// recomputation off and mlp, the loss whole and chunked: the unroll's logits, the loss, every parameter's
// gradient under its native name (`parameters` of them) and the valid positions per step. `family` names
// the case in failure messages.
inline void check_mtp_training_step(const std::string& folder, const std::string& family,
                                    const std::map<std::string, torch::Tensor>& ref, std::size_t parameters) {
  for (auto mode : {head::RecomputeMode::off, head::RecomputeMode::mlp}) {
    for (std::int64_t chunk : {0, 5}) {
      INFO(family << ", recompute " << head::recompute_mode_name(mode) << ", loss_chunk_size " << chunk);
      auto head = mtp_three_step_head(folder, mode, chunk);
      auto in = mtp_reference_inputs(ref);
      {
        torch::NoGradGuard ng;
        auto logits = head->ttt_logits(in);
        REQUIRE(logits.size() == 3);
        for (std::size_t k = 0; k < 3; ++k) {
          INFO("step " << k);
          CHECK(torch::allclose(logits[k], ref.at("logits_" + std::to_string(k)), 1e-4, 1e-5));
        }
      }
      auto out = head->train_step_forward(in, ref.at("denominators"));
      CHECK(out.loss.item<double>() == Approx(ref.at("loss").item<double>()).epsilon(1e-5));
      out.loss.backward();
      std::size_t compared = 0;
      for (auto& p : head->named_parameters()) {
        const auto name = "grad." + head::mtp_native_name(p.key(), head->config());
        INFO(name);
        REQUIRE(ref.count(name));
        CHECK(torch::allclose(p.value().grad(), ref.at(name), 1e-4, 1e-5));
        ++compared;
      }
      CHECK(compared == parameters);
      // Valid positions per step (the reference's denominators): every id is in the full vocabulary.
      CHECK(torch::equal(out.metric_sums.select(1, head::kValid), ref.at("denominators")));
    }
  }
}

// Drafting at anchor p = 3 of the reference's sample 0 against its cache-based serving loop: draft() gives
// the served drafts (also with the prefix in two calls); the explicit steps (draft_extend, then one
// draft_nodes a token: trees, sampled chains) give the same tokens and the served logits; teacher forcing
// on the drafted tokens, the row x_0..x_{p+1}, d_1, d_2 unrolled at p, predicts d_1, d_2, d_3 at steps 1,
// 2, 3 (the hidden states after p are never read at that anchor).
inline void check_mtp_drafting(head::MtpHead& head, const std::map<std::string, torch::Tensor>& ref) {
  const auto hidden = ref.at("hidden"), ids = ref.at("input_ids");
  const std::int64_t p = 3;
  auto cache = head.new_cache(1, 16);
  auto drafts = head.draft(cache, hidden.narrow(1, 0, p + 1), ids.narrow(1, 1, p + 1), 3);
  CHECK(torch::equal(drafts, ref.at("served_drafts")));
  CHECK(cache.length == p + 1);
  auto split = head.new_cache(1, 16);
  head.draft(split, hidden.narrow(1, 0, 2), ids.narrow(1, 1, 2), 1);
  CHECK(torch::equal(head.draft(split, hidden.narrow(1, 2, p - 1), ids.narrow(1, 3, p - 1), 3), drafts));
  auto steps = head.new_cache(1, 16);
  auto step = head.draft_extend(steps, hidden.narrow(1, 0, p + 1), ids.narrow(1, 1, p + 1));
  for (std::int64_t k = 0; k < 3; ++k) {
    auto token = step.logits.argmax(-1);  // [1, 1]
    CHECK(token.item<std::int64_t>() == drafts[0][k].item<std::int64_t>());
    CHECK(torch::allclose(step.logits[0][0], ref.at("served_logits")[0][k], 1e-4, 1e-5));
    if (k == 2) break;
    const auto slot = p + 1 + k;
    step = head.draft_nodes(steps, step.state, token, torch::full({1, 1}, slot, torch::kInt64), slot,
                            torch::ones({1, slot + 1}, torch::kBool));
  }
  head::HeadInputs in;
  in.input_ids = torch::cat({ids.narrow(1, 0, p + 2), drafts.narrow(1, 0, 2)}, 1);
  const auto n = in.input_ids.size(1);
  in.position_ids = torch::arange(n, torch::kInt64).unsqueeze(0);
  in.document_ids = torch::zeros({1, n}, torch::kInt64);
  in.aux_hidden = torch::cat({hidden.narrow(1, 0, p + 1), torch::zeros({1, n - p - 1, hidden.size(2)})}, 1);
  torch::NoGradGuard ng;
  auto logits = head.ttt_logits(in);
  for (std::int64_t k = 0; k < 3; ++k) {
    INFO("step " << k);
    const auto& row = logits[static_cast<std::size_t>(k)][0][p];
    CHECK(row.argmax().item<std::int64_t>() == drafts[0][k].item<std::int64_t>());
    CHECK(torch::allclose(row, ref.at("served_logits")[0][k], 1e-4, 1e-5));
  }
}

}  // namespace eagle::test
