// The numbers logged for one training step window and one evaluation: plain structs the trainer
// fills, turned into metrics.jsonl objects and TensorBoard scalars here so every sink logs the
// same names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace eagle::io {

// Averages over the steps since the previous log line (the logging window).
struct StepStats {
  std::int64_t step = 0;              // optimizer steps done (1-based: the step just finished)
  std::int64_t total_steps = 0;       // optimizer steps of the whole run
  double loss = 0.0;                  // training loss (TTT-step-weighted sum, as optimised)
  std::vector<double> acc;            // acc_k per TTT step k = 0..K-1, in [0, 1]
  double tau = 0.0;                   // estimated acceptance length, in [1, K+1]
  double lr = 0.0;                    // learning rate used by the step just finished
  double grad_norm = 0.0;             // total gradient norm before clipping
  double tokens_per_s = 0.0;          // real (non-pad, non-masked-out input) tokens per second
  double padding_efficiency = 0.0;    // real tokens / padded tokens processed, in (0, 1]
  double ms_per_step = 0.0;           // wall milliseconds per optimizer step
  std::int64_t nonfinite_steps = 0;   // steps skipped for a non-finite loss/gradient, whole run
  std::optional<double> peak_memory_mib;  // device::peak_memory_bytes so far, MiB (rank 0's)
  std::optional<double> tflops;           // model TFLOP/s of one device (rank 0's; head/flops.h, target/flops.h)
  std::optional<double> mfu;              // tflops / the run's peak TFLOP/s per device, in [0, 1] nominally
};

// The greedy chain AR of the prompts of one category (the prompts' `category` field).
struct CategoryAcceptance {
  std::int64_t count = 0;           // prompts of the category decoded
  double ar = 0.0;                  // mean 1 + accepted per round over their rounds (at the eval's draft length)
  double ar_ci95 = 0.0;             // half-width of ar's 95% confidence interval (1.96 sd / sqrt(rounds))
  std::vector<double> ar_by_depth;  // entry k-1: their AR at depth k (as AcceptanceStats::ar_by_depth)
};

// The speculative-decoding metrics of an evaluation (acceptance::measure), each absent when not
// measured.
struct AcceptanceStats {
  std::optional<double> ar;                 // real acceptance rate (mean 1 + accepted per round)
  std::optional<double> ar_ci95;            // half-width of ar's 95% confidence interval
  std::vector<double> ar_by_depth;          // entry k-1: the greedy chain AR drafting k tokens, k = 1..K
  std::map<std::string, CategoryAcceptance> ar_by_category;  // empty: no prompt carries a category
  std::optional<double> tree_ar;            // the same with SGLang's draft tree (eval_tree_*)
  std::optional<double> temp_ar;            // speculative sampling at eval_temperature
  std::optional<double> temp_ar_ci95;       // half-width of temp_ar's 95% confidence interval
  std::optional<double> tree_temp_ar;       // SGLang's tree speculative sampling at eval_temperature
  std::optional<double> tree_temp_ar_ci95;  // half-width of tree_temp_ar's 95% confidence interval
  std::vector<double> alpha;                // analytic acceptance per TTT step at eval_temperature
  std::optional<double> alpha_ar;           // 1 + sum_k prod_{j <= k} alpha_j
};

// One evaluation on the held-out split: the teacher-forced numbers, then the acceptance metrics.
struct EvalStats {
  std::int64_t step = 0;       // optimizer steps done when evaluated
  double loss = 0.0;           // held-out loss
  std::vector<double> acc;     // held-out acc_k per TTT step
  double tau = 0.0;            // held-out estimated acceptance length
  AcceptanceStats acceptance;  // needs the whole target (empty when training offline without one)
};

// Host-side counts of the steps in one logging window (the trainer knows them before each step,
// so counting costs no device sync). Reset by assigning {} after each log line.
struct ThroughputWindow {
  std::int64_t steps = 0;            // optimizer steps in the window
  std::int64_t real_tokens = 0;      // tokens of the samples, without padding
  std::int64_t padded_tokens = 0;    // tokens processed, padding included
  double flops = 0;                  // model FLOPs of this process's steps (its micro-batches' real tokens)
  // One optimizer step of `real` real and `padded` computed tokens (all its micro-batches) and this
  // process's `step_flops` model FLOPs.
  void add(std::int64_t real, std::int64_t padded, double step_flops = 0) {
    ++steps;
    real_tokens += real;
    padded_tokens += padded;
    flops += step_flops;
  }
  // Sets s.tokens_per_s, s.padding_efficiency and s.ms_per_step for a window that took `seconds`
  // of wall time (0 where a denominator is 0), and with FLOPs counted s.tflops, and s.mfu against
  // peak_tflops (> 0).
  void fill(StepStats& s, double seconds, double peak_tflops = 0) const;
};

// metrics.jsonl fields: step, loss, acc, tau, lr, grad_norm, tokens_per_s, padding_efficiency,
// ms_per_step, nonfinite_steps, peak_memory_mib, tflops, mfu (the last three when known). Non-finite numbers become
// null (JSON has no NaN).
nlohmann::json to_json(const StepStats& s);
// step, eval_loss, eval_acc, eval_tau, ar, ar_ci95, ar_by_depth, ar_by_category, tree_ar, temp_ar,
// temp_ar_ci95, tree_temp_ar, tree_temp_ar_ci95, alpha, alpha_ar (each absent when not measured).
nlohmann::json to_json(const EvalStats& e);
// ar_by_depth as a JSON array (non-finite entries null); ar_by_category as an object
// {category: {"count", "ar", "ar_ci95", "ar_by_depth"}}: the format of metrics.jsonl and summary.json.
nlohmann::json ar_by_depth_json(const AcceptanceStats& a);
nlohmann::json ar_by_category_json(const AcceptanceStats& a);

// TensorBoard tags: train/loss, train/acc_<k>, train/tau, train/lr, train/grad_norm,
// train/tokens_per_s, train/padding_efficiency, train/ms_per_step, train/peak_memory_mib, train/tflops,
// train/mfu (the last three when known).
std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepStats& s);
// eval/loss, eval/acc_<k>, eval/tau, eval/ar, eval/ar_depth_<k> (k = 1..K), eval/tree_ar, eval/temp_ar,
// eval/tree_temp_ar, eval/alpha_ar.
std::vector<std::pair<std::string, float>> tensorboard_scalars(const EvalStats& e);

}  // namespace eagle::io
