// eagle-train train end to end, as a subprocess on the tiny Llama fixture and byte-level Alpaca
// data (configs/smoke.json): the smoke run and its files, golden losses, exact resume, SIGTERM then
// resume, the NaN policy, gates and refusals.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "eagle/model/safetensors.h"
#include "cli_helpers.h"
#include "helpers.h"
#include "train_helpers.h"

using eagle::test::check_same_tensors;
using eagle::test::logged_losses;
using eagle::test::read_jsonl;
using eagle::test::run_cli;
using eagle::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSmoke = eagle::test::smoke_args();

}  // namespace

TEST_CASE("the smoke run trains, evaluates and writes every run file", "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto r = run_cli("train " + kSmoke + " --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 40 AR: ") && Catch::Contains("step 80 AR: "));

  auto lines = read_jsonl(out / "metrics.jsonl");
  REQUIRE(lines.size() >= 8);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "acc", "peak_memory_mib"})
    CHECK(lines.front().contains(key));
  CHECK(lines.front()["peak_memory_mib"].get<double>() > 1.0);  // the process's peak RSS on CPU
  CHECK(lines.front()["acc"].size() == 3);
  auto l = logged_losses(out);
  REQUIRE(l.size() == 8);
  // Golden losses of the fixed seed (CPU, one thread); a change in the math moves them.
  CHECK(l.at(10) == Approx(7.1651).margin(2e-3));
  CHECK(l.at(20) == Approx(7.0776).margin(2e-3));
  // The loss falls and acc_0 rises well above chance (1/256 draft tokens).
  CHECK(l.at(80) < l.at(10) - 0.2);
  auto summary = json::parse(eagle::test::read_file(out / "summary.json"));
  CHECK(summary["exit_reason"] == "completed");
  CHECK(summary["steps"] == 80);
  CHECK(summary["ar"].get<double>() >= 1.0);
  CHECK(summary["acc"][0].get<double>() > 0.1);
  CHECK(summary["tokens_per_s"].get<double>() > 0);
  // MFU (docs/training.md): model FLOPs of the steps over their time against the CPU's measured matmul rate.
  CHECK(lines.front()["tflops"].get<double>() > 0);
  CHECK(lines.front()["mfu"].get<double>() > 0);
  CHECK(summary["model_flops"].get<double>() > 0);
  CHECK(summary["mfu"].get<double>() ==
        Approx(summary["tflops"].get<double>() / summary["peak_tflops"].get<double>()).epsilon(1e-9));
  CHECK_THAT(summary["peak_tflops_source"].get<std::string>(), Catch::Contains("matmul rate measured"));
  CHECK_THAT(r.output, Catch::Contains("MFU against ") && Catch::Contains("TFLOP/s | MFU "));
  for (const char* f :
       {"config.json", "command_line.txt", "checkpoint-40/COMPLETE", "checkpoint-80/COMPLETE",
        "checkpoint-80/model.safetensors", "checkpoint-80/config.json", "checkpoint-80/optimizer.safetensors",
        "checkpoint-80/trainer_state.json", "checkpoint-best/best.json", "report.html"})
    CHECK(fs::exists(out / f));
  CHECK_THAT(r.output, Catch::Contains("report: " + (out / "report.html").string()));
  bool events = false;
  for (const auto& e : fs::directory_iterator(out))
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  CHECK(events);

  // The event file reads back with the tensorboard package when it is installed (scripts/setup.sh).
  const std::string py = eagle::test::venv_python();
  if (fs::exists(py)) {
    std::string cmd = py +
                      " -c \"from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E; "
                      "a=E('" +
                      out.string() + "'); a.Reload(); print('steps', len(a.Scalars('train/loss')))\" 2>&1";
    CHECK_THAT(eagle::test::run_command(cmd).output, Catch::Contains("steps 8"));
  }

  // The same config again into the same folder is refused (another run's files), with exit 2.
  auto again = run_cli("train " + kSmoke + " --output_dir " + out.string() + " --overwrite_output_dir=false");
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.output, Catch::Contains("overwrite_output_dir"));
}

TEST_CASE("--peak_tflops is the peak MFU is measured against; the FLOP count does not depend on timing", "[train]") {
  TempDir dir;
  const auto args = " --max_steps 4 --eval_steps 0 --save_steps 0 --logging_steps 2 --peak_tflops 1000";
  auto a = run_cli("train " + kSmoke + args + " --output_dir " + (dir / "a").string());
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  auto b = run_cli("train " + kSmoke + args + " --num_threads 2 --output_dir " + (dir / "b").string());
  REQUIRE(b.exit_code == 0);
  auto sa = json::parse(eagle::test::read_file(dir / "a" / "summary.json"));
  auto sb = json::parse(eagle::test::read_file(dir / "b" / "summary.json"));
  CHECK(sa["peak_tflops"].get<double>() == 1000.0);
  CHECK(sa["peak_tflops_source"] == "--peak_tflops");
  CHECK(sa["mfu"].get<double>() == Approx(sa["tflops"].get<double>() / 1000.0).epsilon(1e-9));
  CHECK(sa["model_flops"].get<double>() > 0);
  CHECK(sa["model_flops"] == sb["model_flops"]);  // counted from the batches, not measured
}

TEST_CASE("a resumed run continues the same run exactly", "[train]") {
  TempDir dir;
  auto straight = dir / "straight";
  auto args = " --max_steps 24 --save_steps 12 --eval_steps 0 --save_total_limit 0 --logging_steps 2";
  REQUIRE(run_cli("train " + kSmoke + args + " --output_dir " + straight.string()).exit_code == 0);
  // A second run that starts from the straight run's step-12 checkpoint.
  auto resumed = dir / "resumed";
  fs::create_directories(resumed);
  fs::copy(straight / "checkpoint-12", resumed / "checkpoint-12", fs::copy_options::recursive);
  auto r = run_cli("train " + kSmoke + args + " --output_dir " + resumed.string() + " --resume_from_checkpoint auto");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("resumed from"));
  auto a = logged_losses(straight), b = logged_losses(resumed);
  for (std::int64_t step = 14; step <= 24; step += 2) {
    INFO("step " << step);
    REQUIRE(b.count(step));
    CHECK(a.at(step) == b.at(step));  // bit-identical on CPU
  }
  check_same_tensors(straight / "checkpoint-24/model.safetensors", resumed / "checkpoint-24/model.safetensors");
  check_same_tensors(straight / "checkpoint-24/optimizer.safetensors", resumed / "checkpoint-24/optimizer.safetensors");
}

TEST_CASE("resuming a completed run says so and touches nothing", "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto args = " --max_steps 4 --eval_steps 0 --eval_num_prompts 2 --output_dir " + out.string();
  REQUIRE(run_cli("train " + kSmoke + args).exit_code == 0);
  std::map<std::string, std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) before[fs::relative(e.path(), out).string()] = eagle::test::read_file(e.path());
  auto r = run_cli("train " + kSmoke + args + " --resume_from_checkpoint auto");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("is complete") && Catch::Contains("nothing to do"));
  std::map<std::string, std::string> after;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) after[fs::relative(e.path(), out).string()] = eagle::test::read_file(e.path());
  after.erase(".lock");  // the lock file names its latest holder
  before.erase(".lock");
  CHECK(after == before);  // no line appended, no checkpoint rewritten, no new event file
}

TEST_CASE("resume refuses options that shape the head or the data, naming each", "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto args = " --max_steps 4 --save_steps 2 --eval_steps 0 --eval_num_prompts 0 --output_dir " + out.string();
  REQUIRE(run_cli("train " + kSmoke + args).exit_code == 0);
  auto ckpt = (out / "checkpoint-2").string();
  auto r = run_cli("train " + kSmoke + args + " --max_steps 8 --resume_from_checkpoint " + ckpt +
                   " --ttt_steps 2 --aux_hidden_state_layer_ids 0,1,2 --draft_vocab_size 128 --eagle_version 3");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("other options (3 differ)") &&
                           Catch::Contains("ttt_steps: checkpoint 3, now 2") &&
                           Catch::Contains("aux_hidden_state_layer_ids") && Catch::Contains("draft_vocab_size"));
  // The default aux ids written out (the tiny 4-layer target's [1, 2, 3]) are the same head: resolved
  // values are compared, not the empty default with its spelled-out value.
  auto same = run_cli("train " + kSmoke + args + " --max_steps 4 --resume_from_checkpoint " + ckpt +
                      " --aux_hidden_state_layer_ids 1,2,3");
  INFO(same.output);
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.output, Catch::Contains("resumed from"));
  // What may change does: a longer run with another learning rate and logging interval.
  auto ok = run_cli("train " + kSmoke + args + " --max_steps 8 --learning_rate 0.001 --logging_steps 4" +
                    " --resume_from_checkpoint auto");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
}

TEST_CASE("SIGTERM checkpoints and exits 130; auto resume finishes the run", "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto args = " --max_steps 200 --eval_steps 0 --save_steps 0 --logging_steps 1 --eval_num_prompts 0";
  const pid_t pid = eagle::test::start_cli("train " + kSmoke + args + " --output_dir " + out.string(), dir / "log.txt");
  // Wait until a few steps are logged, then ask it to stop.
  for (int i = 0; i < 600 && logged_losses(out).size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(logged_losses(out).size() >= 3);
  kill(pid, SIGTERM);
  const int code = eagle::test::wait_exit(pid);
  INFO(eagle::test::read_file(dir / "log.txt"));
  REQUIRE(code >= 0);  // exited, not killed
  CHECK(code == 130);
  auto summary = json::parse(eagle::test::read_file(out / "summary.json"));
  CHECK(summary["exit_reason"] == "interrupted");
  CHECK(summary["detail"] == "SIGTERM");
  const std::int64_t stopped = summary["steps"].get<std::int64_t>();
  CHECK(stopped < 200);
  CHECK(fs::exists(out / ("checkpoint-" + std::to_string(stopped)) / "COMPLETE"));

  auto r = run_cli("train " + kSmoke + args + " --output_dir " + out.string() + " --resume_from_checkpoint auto");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(json::parse(eagle::test::read_file(out / "summary.json"))["steps"] == 200);
  auto l = logged_losses(out);
  CHECK(l.size() == 200);  // no step logged twice, none missing
}

TEST_CASE("a second run on a running run's output_dir is refused naming the first one's pid", "[train]") {
  TempDir dir;
  auto out = dir / "run";
  auto args = " --max_steps 400 --eval_steps 0 --save_steps 0 --logging_steps 1 --eval_num_prompts 0";
  const pid_t pid = eagle::test::start_cli("train " + kSmoke + args + " --output_dir " + out.string(), dir / "log.txt");
  for (int i = 0; i < 600 && logged_losses(out).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE_FALSE(logged_losses(out).empty());
  for (const char* extra : {" --resume_from_checkpoint auto", " --overwrite_output_dir"}) {
    auto r = run_cli("train " + kSmoke + args + extra + " --output_dir " + out.string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("in use by another eagle-train process") &&
                             Catch::Contains("pid " + std::to_string(pid)));
  }
  kill(pid, SIGKILL);  // the kernel releases the lock with the process
  eagle::test::wait_exit(pid);
  auto r = run_cli("train " + kSmoke +
                   " --max_steps 2 --eval_steps 0 --eval_num_prompts 0 --resume_from_checkpoint auto"
                   " --output_dir " + out.string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("non-finite values stop the run under nan_policy error and are skipped under skip", "[train]") {
  TempDir dir;
  // A learning rate of 1e30 makes the weights overflow after the first update. The option table
  // refuses it on the command line (learning_rate is at most 1), so the run is started in-process.
  eagle::config::Options o = eagle::test::smoke_options();
  o.max_steps = 6;
  o.logging_steps = 2;
  o.eval_steps = 0;
  o.eval_num_prompts = 0;
  o.warmup_steps = 0;
  o.learning_rate = 1e30;
  o.output_dir = (dir / "err").string();
  eagle::Error e = eagle::test::train_error(o);
  CHECK(static_cast<int>(e.exit_code()) == 5);
  CHECK_THAT(e.format(), Catch::Contains("non-finite loss or gradient") && Catch::Contains("step 2"));
  o.nan_policy = eagle::config::NanPolicy::skip;
  o.output_dir = (dir / "skip").string();
  CHECK(eagle::train::train(o, {"eagle-train", "train"}).exit_reason == eagle::run::ExitReason::completed);
  std::int64_t nonfinite = -1;
  for (const auto& j : read_jsonl(dir / "skip" / "metrics.jsonl"))
    if (j.contains("nonfinite_steps")) nonfinite = j["nonfinite_steps"].get<std::int64_t>();
  CHECK(nonfinite == 5);
}

TEST_CASE("a window without a trained position logs loss n/a, never 0", "[train]") {
  TempDir dir;
  // Only the second token of most samples is trained: no position t has t+2 trained (the first TTT
  // step predicts two tokens ahead), so their steps have nothing to learn from. One sample trains
  // (data with no trainable position at all is refused before training).
  std::string data = "{\"input_ids\": [1, 2, 3, 4], \"loss_mask\": [0, 0, 1, 1]}\n";
  for (int i = 0; i < 11; ++i) data += "{\"input_ids\": [" + std::to_string(10 + i) + ", 7], \"loss_mask\": [0, 1]}\n";
  eagle::test::write_file(dir / "untrainable.jsonl", data);
  auto r = run_cli("train " + kSmoke + " --data_path " + (dir / "untrainable.jsonl").string() +
                   " --validation_fraction 0 --per_device_train_batch_size 1 --max_steps 4 --logging_steps 1 " +
                   "--output_dir " + (dir / "run").string());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("loss n/a") && Catch::Contains("had no position to train") &&
                           !Catch::Contains("loss 0.0000"));
  int null_losses = 0;
  for (const auto& j : read_jsonl(dir / "run" / "metrics.jsonl"))
    if (j.contains("loss")) null_losses += j["loss"].is_null() ? 1 : 0;
  CHECK(null_losses >= 3);

  // A held-out split with nothing to score: the evaluation line reads n/a too.
  eagle::test::write_file(dir / "heldout.jsonl", "{\"input_ids\": [10, 7], \"loss_mask\": [0, 1]}\n");
  auto e = run_cli("train " + kSmoke + " --eval_data_path " + (dir / "heldout.jsonl").string() +
                   " --max_steps 2 --eval_steps 0 --eval_num_prompts 0 --output_dir " + (dir / "eval").string());
  INFO(e.output);
  CHECK(e.exit_code == 0);
  CHECK_THAT(e.output, Catch::Contains("eval loss n/a") && Catch::Contains("no held-out position was scored") &&
                           !Catch::Contains("eval loss 0.0000"));
  bool evaluated = false;
  for (const auto& j : read_jsonl(dir / "eval" / "metrics.jsonl"))
    if (j.contains("eval_loss")) {
      evaluated = true;
      CHECK(j["eval_loss"].is_null());
    }
  CHECK(evaluated);
}

TEST_CASE("CI gates fail the run with exit 6 and say which", "[train]") {
  TempDir dir;
  auto r =
      run_cli("train " + kSmoke + " --max_steps 4 --eval_steps 0 --min_ar 3.5 --max_final_loss 0.01 --output_dir " +
              (dir / "run").string());
  CHECK(r.exit_code == 6);
  CHECK_THAT(r.output, Catch::Contains("min_ar") && Catch::Contains("max_final_loss"));
  auto summary = json::parse(eagle::test::read_file(dir / "run" / "summary.json"));
  CHECK(summary["exit_reason"] == "gate_missed");
}

TEST_CASE("the trainer refuses bad input before training", "[train]") {
  TempDir dir;
  eagle::test::write_file(dir / "big.jsonl", "{\"input_ids\": [1, 2, 3, 4, 5, 6]}\n{\"input_ids\": [1, 2, 9999, 4]}\n");
  auto r = run_cli("train " + kSmoke + " --data_path " + (dir / "big.jsonl").string() + " --output_dir " +
                   (dir / "a").string());
  CHECK(r.exit_code == 3);
  // Named by file and line, before any tensor exists.
  CHECK_THAT(r.output, Catch::Contains("big.jsonl: line 2") &&
                           Catch::Contains("token id outside the target's vocabulary") && Catch::Contains("9999") &&
                           Catch::Contains("ids < 512"));
  auto m = run_cli("train " + kSmoke + " --model_name_or_path " + (dir / "nothing").string() + " --output_dir " +
                   (dir / "b").string());
  CHECK(m.exit_code == 3);
  CHECK_THAT(m.output, Catch::Contains((dir / "nothing").string()));
  auto v = run_cli("train " + kSmoke + " --aux_hidden_state_layer_ids 1,2,9 --output_dir " + (dir / "c").string());
  CHECK(v.exit_code != 0);
  CHECK_THAT(v.output, Catch::Contains("9"));
  // EAGLE-3 fuses exactly three layers: another count is refused with the options, before loading.
  for (const char* ids : {"1,2", "0,1,2,3"}) {
    auto n =
        run_cli("train " + kSmoke + " --aux_hidden_state_layer_ids " + ids + " --output_dir " + (dir / "d").string());
    INFO(n.output);
    CHECK(n.exit_code == 2);
    CHECK_THAT(n.output, Catch::Contains("--aux_hidden_state_layer_ids") && Catch::Contains("3 layer ids for EAGLE-3"));
    CHECK_FALSE(std::filesystem::exists(dir / "d"));
  }
}

TEST_CASE("each newer target family trains (padded and padding-free) and its export names it", "[train]") {
  // The MoE families, Gemma 2/3 (soft caps, two RoPEs), Phi-3 (longrope, partial rotary) and an FP8 checkpoint.
  for (const char* name : {"tiny-qwen3-moe", "tiny-mixtral", "tiny-gpt-oss-mxfp4", "tiny-gemma3", "tiny-gemma2",
                           "tiny-phi3", "tiny-qwen3-fp8"}) {
    INFO(name);
    const auto model = std::string(EAGLE_SOURCE_DIR) + "/tests/fixtures/models/" + name;
    const auto arch = json::parse(eagle::test::read_file(fs::path(model) / "config.json"))["architectures"][0];
    for (const char* padding_free : {"false", "true"}) {
      INFO("padding_free " << padding_free);
      TempDir dir;
      auto out = dir / "run";
      auto r = run_cli("train " + kSmoke + " --model_name_or_path " + model + " --padding_free=" + padding_free +
                       " --max_steps 6 --logging_steps 3 --eval_steps 6 --save_steps 6 --output_dir " + out.string());
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains(arch.get<std::string>()) && Catch::Contains("step 6 AR: "));
      auto losses = logged_losses(out);
      REQUIRE(losses.size() == 2);
      CHECK(std::isfinite(losses.at(6)));
      auto exported = dir / "speculators";
      auto ex = run_cli("export --checkpoint " + (out / "checkpoint-6").string() + " --format speculators --output " +
                        exported.string());
      INFO(ex.output);
      REQUIRE(ex.exit_code == 0);
      auto cfg = json::parse(eagle::test::read_file(exported / "config.json"));
      CHECK(cfg["speculators_config"]["verifier"]["architectures"] == json::array({arch}));
    }
  }
}

TEST_CASE("an EAGLE 3.1 head with the Qwen3-style layer trains, exports its switches and refuses a changed variant",
          "[train]") {
  TempDir dir;
  auto out = dir / "run";
  const std::string variant = " --fc_norm --norm_output --draft_layer qwen3";
  auto r = run_cli("train " + kSmoke + variant + " --max_steps 4 --logging_steps 2 --eval_steps 4 --save_steps 4" +
                   " --output_dir " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("step 4 AR: "));
  auto cfg = json::parse(eagle::test::read_file(out / "checkpoint-4" / "config.json"));
  CHECK(cfg["fc_norm"] == true);
  CHECK(cfg["norm_output"] == true);
  auto ex = run_cli("export --checkpoint " + (out / "checkpoint-4").string() + " --format speculators --output " +
                    (dir / "spec").string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  auto spec = json::parse(eagle::test::read_file(dir / "spec" / "config.json"));
  CHECK(spec["transformer_layer_config"]["model_type"] == "qwen3");
  CHECK(spec["fc_norm"] == true);
  auto resumed = run_cli("train " + kSmoke + " --fc_norm --max_steps 6 --resume_from_checkpoint auto --output_dir " +
                         out.string());
  INFO(resumed.output);
  CHECK(resumed.exit_code == 2);
  CHECK_THAT(resumed.output, Catch::Contains("norm_output") && Catch::Contains("draft_layer"));
}
