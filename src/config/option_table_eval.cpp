// The option table's eval group: how held-out evaluation and the acceptance rates are measured and
// used (see option_table.cpp for the rest).
#include "eagle/config/option_table.h"

#include <fmt/format.h>

#include "eagle/util/error.h"
#include "option_builder.h"

namespace eagle::config {
namespace {

// "" when eval_tree_draft_tokens fits the tree of `steps`, else what was expected.
std::string tree_draft_tokens_expected(const Options& o, std::int64_t steps) {
  const auto v = o.eval_tree_draft_tokens;
  if (o.eval_tree_topk == 0 || v == 0) return std::string();
  const auto most = 1 + o.eval_tree_topk + (steps - 1) * o.eval_tree_topk * o.eval_tree_topk;
  return v >= 2 && v <= most ? std::string()
                             : fmt::format("2 .. {} (1 + topk + (steps - 1) * topk^2 for steps {})", most, steps);
}

}  // namespace

void check_best_metric_depth(const Options& o, std::int64_t draft_len) {
  EAGLE_CHECK(o.best_metric_depth <= draft_len,
              Error(ErrorKind::usage, "invalid option value")
                  .place("--best_metric_depth")
                  .expected(fmt::format("0 .. {} (the evaluation's draft length)", draft_len))
                  .found(std::to_string(o.best_metric_depth))
                  .hint("the draft length is eval_draft_len, else the head's TTT steps"));
}

void check_tree_draft_tokens(const Options& o, std::int64_t steps) {
  const auto expected = tree_draft_tokens_expected(o, steps);
  EAGLE_CHECK(expected.empty(), Error(ErrorKind::usage, "invalid option value")
                                    .place("--eval_tree_draft_tokens")
                                    .expected(expected)
                                    .found(std::to_string(o.eval_tree_draft_tokens))
                                    .hint("the steps are the head's TTT steps unless eval_tree_steps or "
                                          "eval_draft_len name them"));
}

}  // namespace eagle::config

namespace eagle::config::detail {

void declare_eval_options(Table& t) {
  using G = Group;
  // eval
  t.add(&Options::eval_steps, "eval_steps", G::eval, kTrain,
        "Evaluate every this many optimizer steps; 0: only at the end")
      .range(0, kMaxSteps);
  t.add(&Options::eval_num_prompts, "eval_num_prompts", G::eval, kTrain | kEval,
        "Held-out prompts decoded speculatively to measure the acceptance rate; 0: skip it")
      .range(0, 1 << 20);
  t.add(&Options::eval_max_new_tokens, "eval_max_new_tokens", G::eval, kTrain | kEval,
        "Tokens generated per evaluation prompt (stops earlier at the target's eos)")
      .range(1, kMaxNewTokens);
  t.add(&Options::eval_batch_size, "eval_batch_size", G::eval, kTrain | kEval,
        "Prompts decoded at once in the acceptance evaluation (ragged KV caches, a row refilled when its "
        "prompt ends; the same acceptance per prompt as one by one); 1: one by one. EAGLE-1, P-EAGLE and MTP "
        "heads and the tree and sampled acceptances decode one by one")
      .range(1, 4096);
  t.add(&Options::eval_draft_len, "eval_draft_len", G::eval, kTrain | kEval,
        "Tokens the head drafts per round in the acceptance evaluation; 0: ttt_steps (a DFlash draft: "
        "dflash_block_size - 1, and at most that)")
      .range(0, 32)
      .check([](std::int64_t v, const Options& o) {
        return o.draft == Draft::dflash && v > o.dflash_block_size - 1
                   ? fmt::format("at most dflash_block_size - 1 ({}) for a DFlash draft", o.dflash_block_size - 1)
                   : std::string();
      });
  t.add(&Options::eval_tree_steps, "eval_tree_steps", G::eval, kTrain | kEval,
        "Tree acceptance (with eval_tree_topk > 0): drafting steps per round, SGLang's --speculative-num-steps; "
        "0: eval_draft_len's value")
      .range(0, 32)
      .acts_only(kTrain | kEval, "--eval_tree_topk > 0", [](const Options& o) { return o.eval_tree_topk > 0; });
  t.add(&Options::eval_tree_topk, "eval_tree_topk", G::eval, kTrain | kEval,
        "Tree acceptance: tokens each frontier node is expanded by, SGLang's --speculative-eagle-topk; 0: no tree "
        "evaluation")
      .range(0, 16)
      .check([](std::int64_t v, const Options& o) {
        if (v != 0 && o.parallel_drafting) return std::string("0 for a P-EAGLE head (parallel_drafting)");
        if (v != 0 && o.draft == Draft::dflash) return std::string("0 for a DFlash draft (one block a round, no tree)");
        return v == 0 || o.eagle_version == 3 ? std::string() : std::string("0 for an EAGLE-1 head");
      });
  t.add(&Options::eval_tree_draft_tokens, "eval_tree_draft_tokens", G::eval, kTrain | kEval,
        "Tree acceptance: tokens verified per round, the root included, SGLang's --speculative-num-draft-tokens; "
        "at most 1 + topk + (steps - 1) * topk^2; 0: steps + 1 (only with eval_tree_topk 1)")
      .range(0, 1024)
      .check([](std::int64_t v, const Options& o) {
        if (o.eval_tree_topk == 0) return std::string();
        if (v == 0) return o.eval_tree_topk == 1 ? std::string() : std::string("a count >= 2 when eval_tree_topk > 1");
        // Steps from the head's TTT steps are known once it is built or read (eval's head is not
        // train's options): checked then, by EvalSettings::from.
        if (o.eval_tree_steps == 0 && o.eval_draft_len == 0) return v >= 2 ? std::string() : std::string("2 or more");
        return tree_draft_tokens_expected(o, o.eval_tree_steps > 0 ? o.eval_tree_steps : o.eval_draft_len);
      })
      .acts_only(kTrain | kEval, "--eval_tree_topk > 0", [](const Options& o) { return o.eval_tree_topk > 0; });
  t.add(&Options::eval_temperature, "eval_temperature", G::eval, kTrain | kEval,
        "Sampled acceptance (speculative sampling, rejection rule) and the analytic alpha_k at this temperature, "
        "seeded by seed; with eval_tree_topk > 0 also SGLang's tree speculative sampling (tree_temp_ar); "
        "0: greedy only")
      .range(0.0, 100.0)
      .check([](double v, const Options& o) {
        return v == 0.0 || o.eagle_version == 3 ? std::string() : std::string("0 for an EAGLE-1 head");
      });
  t.add(&Options::eval_top_p, "eval_top_p", G::eval, kTrain | kEval,
        "Nucleus mass of the target's and the draft's distributions at eval_temperature; 1: the whole vocabulary")
      .range(0.0, 1.0)
      .check([](double v, const Options&) { return v > 0.0 && v <= 1.0 ? "" : "a number in (0, 1]"; })
      .acts_only(kTrain | kEval, "--eval_temperature > 0", [](const Options& o) { return o.eval_temperature > 0.0; });
  t.add(&Options::eval_draft_sampling, "eval_draft_sampling", G::eval, kTrain | kEval,
        "Drafts at eval_temperature: greedy (the head's argmax, q one-hot: vLLM's default) or sample (from the "
        "head's distribution)")
      .acts_only(kTrain | kEval, "--eval_temperature > 0", [](const Options& o) { return o.eval_temperature > 0.0; });
  t.add(&Options::best_metric, "best_metric", G::eval, kTrain | kEval,
        "What checkpoint-best and min_ar use: ar (greedy chain AR; tau without a target), tree_ar, temp_ar "
        "(sampled AR at eval_temperature), alpha_ar (alpha_k's chain estimate), loss (held-out loss, lower "
        "is better; min_ar then gates the chain AR)")
      .check([](BestMetric m, const Options& o) {
        if (m == BestMetric::tree_ar && o.eval_tree_topk == 0) return std::string("eval_tree_topk > 0 for tree_ar");
        if ((m == BestMetric::temp_ar || m == BestMetric::alpha_ar) && o.eval_temperature <= 0.0)
          return std::string("eval_temperature > 0 for temp_ar and alpha_ar");
        return std::string();
      });
  t.add(&Options::best_metric_depth, "best_metric_depth", G::eval, kTrain | kEval,
        "With best_metric ar (or loss, for min_ar): the draft depth k whose greedy chain AR checkpoint-best and "
        "min_ar use (ar_by_depth's k-th entry, named ar@k), at most the evaluation's draft length; 0: the AR at "
        "the evaluation's draft length")
      .range(0, 32)
      .check([](std::int64_t v, const Options& o) {
        if (v == 0) return std::string();
        if (o.best_metric != BestMetric::ar && o.best_metric != BestMetric::loss)
          return std::string("0 unless best_metric is ar or loss");
        if (o.eval_draft_len > 0 && v > o.eval_draft_len)
          return fmt::format("0 .. {} (eval_draft_len)", o.eval_draft_len);
        return std::string();
      });
  t.add(&Options::min_ar, "min_ar", G::eval, kTrain | kEval,
        "CI gate: exit non-zero when the final acceptance rate (best_metric's) is below this; 0: no gate")
      .range(0.0, 33.0);  // accepted tokens per round: at most eval_draft_len (<= 32) + 1
  t.add(&Options::max_final_loss, "max_final_loss", G::eval, kTrain,
        "CI gate: exit non-zero when the final training loss is above this; 0: no gate")
      .range(0.0, 1e6);
}

}  // namespace eagle::config::detail
