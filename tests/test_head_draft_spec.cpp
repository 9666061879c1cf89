// The draft table (head/draft_spec.h): every draft kind has one row; a head its row configures and makes
// for a real fixture target reports the row's kind, reads what the row planned, and is checkpointed in
// the row's layout; each of the row's formats round-trips through the loader bit for bit.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "eagle/head/draft_spec.h"
#include "eagle/head/export/io.h"
#include "eagle/target/target.h"
#include "helpers.h"

using namespace eagle;

namespace {

const std::string kModels = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/";
constexpr config::DraftKind kAllKinds[] = {config::DraftKind::eagle3, config::DraftKind::eagle1,
                                           config::DraftKind::mtp,    config::DraftKind::dflash,
                                           config::DraftKind::dspark, config::DraftKind::dflash2};

// A small head of the row's kind as `train` builds one (plan, configure, make), for a fixture target
// that has what the kind needs (an MTP layer for mtp).
std::shared_ptr<head::DraftHead> made_head(const head::DraftSpec& row, const target::TargetEnds& ends,
                                           const std::string& dir, head::FeatureNeeds* planned = nullptr) {
  head::HeadSettings s;
  s.eagle_version = row.kind == config::DraftKind::eagle1 ? 1 : 3;
  s.ttt_steps = 2;
  s.num_layers = 1;
  s.dflash_block_size = 4;
  s.dflash_num_anchors = 8;
  s.model_dir = s.target_dir = s.target_name = dir;
  const auto needs = row.plan(s);
  if (planned) *planned = needs;
  if (needs.aux_hidden && !needs.last_as_aux)
    s.aux_layer_ids = needs.aux_layer_ids.empty() ? target::default_aux_layer_ids(ends.config.num_hidden_layers)
                                                  : needs.aux_layer_ids;
  const auto V = ends.config.vocab_size;
  const auto vocab = row.reduced_vocab ? head::build_draft_vocab({{7, 3}, {9, 1}}, V, 16) : head::DraftVocab::identity(V);
  const auto cfg = row.configure(s, ends.config, vocab.size());
  return row.make(cfg, s, ends, vocab, torch::kCPU);
}

}  // namespace

TEST_CASE("every draft kind has exactly one row, named once", "[head]") {
  std::set<std::string> names;
  for (auto kind : kAllKinds) {
    const auto& row = head::draft_spec(kind);
    CHECK(row.kind == kind);
    names.insert(row.name);
    CHECK(!row.formats.empty());
    CHECK(row.plan != nullptr);
    CHECK(row.reads != nullptr);
    CHECK(row.configure != nullptr);
    CHECK(row.make != nullptr);
    CHECK(row.loss_plan != nullptr);
    CHECK(row.limits != nullptr);
    CHECK(row.resolve_resume != nullptr);
  }
  CHECK(names.size() == std::size(kAllKinds));
  CHECK(head::draft_specs().size() == std::size(kAllKinds));
}

TEST_CASE("a head made by its row reports the row's kind and round-trips through every format of the row",
          "[head]") {
  for (auto kind : kAllKinds) {
    const auto& row = head::draft_spec(kind);
    INFO(row.name);
    const std::string dir = kModels + (kind == config::DraftKind::mtp ? "tiny-mimo" : "tiny-llama");
    const auto ends = target::TargetModel::load_ends(dir, torch::kFloat32, torch::kCPU);
    head::FeatureNeeds planned;
    torch::manual_seed(3);
    auto head = made_head(row, ends, dir, &planned);
    const auto& cfg = head->config();
    CHECK(head::kind_of(cfg) == kind);
    CHECK(&head::draft_spec(cfg) == &row);
    CHECK(head::checkpoint_format(cfg) == row.checkpoint);
    // What the loaded head reads is what the inputs were planned for.
    const auto reads = row.reads(cfg);
    CHECK(reads.aux_hidden == planned.aux_hidden);
    CHECK(reads.last_as_aux == planned.last_as_aux);
    CHECK(reads.last_pre_norm == planned.last_pre_norm);
    if (!planned.aux_layer_ids.empty()) CHECK(reads.aux_layer_ids == planned.aux_layer_ids);
    for (auto format : row.formats) {
      INFO(head::format_name(format));
      test::TempDir tmp;
      const auto out = (tmp / "head").string();
      std::filesystem::create_directories(out);
      // speculators' EAGLE-3 layout carries the target's embedding; its DSpark layout does not (vLLM shares it).
      const bool embedding = format == head::HeadFormat::speculators && kind != config::DraftKind::dspark &&
                             kind != config::DraftKind::dflash2;
      head::write_head_files(*head, format, out, embedding ? ends.embed : torch::Tensor());
      const auto loaded = head::load_head(out);
      // Read back as a layout of the row (a DFlash folder for SGLang is vLLM's DFlashDraftModel layout).
      CHECK(std::find(row.formats.begin(), row.formats.end(), loaded.format) != row.formats.end());
      if (kind != config::DraftKind::dflash) CHECK(loaded.format == format);
      CHECK(head::kind_of(loaded.config) == kind);
      const auto before = head::named_parameters(*head), after = head::named_parameters(*loaded.head);
      REQUIRE(before.size() == after.size());
      for (std::size_t i = 0; i < before.size(); ++i) {
        INFO(before[i].first);
        CHECK(before[i].first == after[i].first);
        CHECK(torch::equal(before[i].second, after[i].second));
      }
    }
  }
}

TEST_CASE("the loss plans: TTT heads count their positions, block drafts draw anchors as their extra input", "[head]") {
  data::Batch b;
  b.rows = 1;
  b.length = 12;
  b.loss_mask.assign(12, 1);
  b.document_ids.assign(12, 0);
  b.input_ids.assign(12, 3);
  b.position_ids.resize(12);
  for (int i = 0; i < 12; ++i) b.position_ids[static_cast<std::size_t>(i)] = i;
  for (auto kind : kAllKinds) {
    const auto& row = head::draft_spec(kind);
    INFO(row.name);
    const std::string dir = kModels + (kind == config::DraftKind::mtp ? "tiny-mimo" : "tiny-llama");
    const auto ends = target::TargetModel::load_ends(dir, torch::kFloat32, torch::kCPU);
    auto head = made_head(row, ends, dir);
    const auto plan = row.loss_plan({b, b}, head->config(), head::PlanSeed{42, 1, 0});
    REQUIRE(plan.denominators.size() == static_cast<std::size_t>(head->config().steps()));
    REQUIRE(plan.extras.size() == 2);
    if (kind == config::DraftKind::dflash || kind == config::DraftKind::dspark || kind == config::DraftKind::dflash2) {
      CHECK(plan.extras[0].defined());
      CHECK(plan.extras[0].dim() == 2);
      // 8 anchors a row (dflash_num_anchors), every one a candidate (DFlash: 9 of 0..8 hold its block of 4;
      // DSpark: 8 of 0..7 hold its block and the token after it; DFlash2: DFlash's), every slot trained: 8 per
      // slot, two batches.
      for (const auto d : plan.denominators) CHECK(d == 16);
      // The same seed draws the same anchors; an evaluation's plan (step -1) is the same every time.
      const auto again = row.loss_plan({b, b}, head->config(), head::PlanSeed{42, 1, 0});
      CHECK(torch::equal(plan.extras[1], again.extras[1]));
      CHECK(plan.denominators == again.denominators);
    } else {
      CHECK_FALSE(plan.extras[0].defined());
      // t + k + 2 < 12 in one document, every position trained: 10 - k per batch.
      for (std::size_t k = 0; k < plan.denominators.size(); ++k)
        CHECK(plan.denominators[k] == 2 * (10 - static_cast<std::int64_t>(k)));
    }
  }
}
