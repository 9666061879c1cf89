// eagle-train follow (see follow.h): the round loop.
#include "eagle/follow/follow.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "eagle/data/loader.h"
#include "eagle/data/sample_writer.h"
#include "eagle/follow/publish.h"
#include "eagle/follow/rollouts.h"
#include "eagle/follow/state.h"
#include "eagle/io/report.h"
#include "eagle/io/tensorboard.h"
#include "eagle/run/dir_lock.h"
#include "eagle/run/signals.h"
#include "eagle/target/target_config.h"
#include "eagle/train/trainer.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"
#include "measure.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace eagle::follow {

namespace {

constexpr const char* kRoundDir = "round";         // the round in progress: a train run's output_dir
constexpr const char* kLogFile = "metrics.jsonl";  // one line per round: `eagle-train report` draws it

// What one round trains on and measures with.
struct RoundPlan {
  std::vector<Shard> fresh;         // new shards trained on, then recorded as consumed
  std::vector<Shard> dropped;       // new shards too old to train on (follow_max_version_lag), recorded as such
  std::vector<std::string> replay;  // consumed shards trained on again
  std::string heldout;              // the newest shard: the publish gate's prompts (trained on next round)
};

// A shard read as train reads it; Error(input) naming the file when it is malformed or holds nothing to train on.
data::Dataset read_shard(const fs::path& file, const config::Options& o, std::int64_t vocab_size) {
  auto lo = data::LoadOptions::from(o);
  lo.validation_fraction = 0;
  lo.vocab_size = vocab_size;
  return std::move(data::load_dataset(file.string(), lo).train);
}

// The new shards of the rollout folder. Each is read once (`checked` holds those read before, across the waits): a
// malformed one is moved to quarantine/ with one log line.
std::vector<Shard> scan(const config::Options& o, const FollowState& state, std::int64_t policy_version,
                        std::int64_t vocab_size, std::set<std::string>& checked) {
  std::vector<Shard> out;
  const fs::path dir = o.rollout_dir;
  std::int64_t order = 0;
  for (const auto& s : state.shards) order = std::max(order, s.seen_order + 1);
  for (const auto& file : new_shard_files(dir, state.shard_names())) {
    const auto name = file.filename().string();
    if (!checked.count(name)) {
      try {
        read_shard(file, o, vocab_size);
      } catch (const Error& e) {
        const auto to = quarantine(dir, name);
        log::warn("follow", "quarantined a malformed shard: {} -> {} ({})", file.string(), to.string(), e.what());
        continue;
      }
      checked.insert(name);
    }
    const auto named = version_in_name(name);
    out.push_back({name, fs::file_size(file), named >= 0 ? named : policy_version, order++});
  }
  return out;
}

// The round's shards: the oldest follow_window new shards but the newest (held out; new shards more than
// follow_max_version_lag versions behind are dropped), replay drawn from the consumed shards still in the folder and
// within the version lag; nothing when fewer than two new shards are there.
RoundPlan plan_round(const config::Options& o, const FollowState& state, std::vector<Shard> fresh,
                     std::int64_t policy_version) {
  RoundPlan plan;
  if (fresh.size() < 2) return plan;
  plan.heldout = fresh.back().name;
  fresh.pop_back();
  auto too_old = [&](const Shard& s) {
    return o.follow_max_version_lag > 0 && policy_version - s.version > o.follow_max_version_lag;
  };
  for (auto& s : fresh) {
    if (too_old(s)) {
      s.dropped = true;
      plan.dropped.push_back(s);
    } else if (std::ssize(plan.fresh) < o.follow_window) {
      plan.fresh.push_back(s);
    }
  }
  if (plan.fresh.empty()) return {};
  std::vector<std::string> pool;
  for (const auto& s : state.shards)
    if (!s.dropped && !too_old(s) && fs::exists(fs::path(o.rollout_dir) / s.name)) pool.push_back(s.name);
  std::mt19937_64 rng(static_cast<std::uint64_t>(o.seed + state.rounds));
  std::shuffle(pool.begin(), pool.end(), rng);
  if (std::ssize(pool) > o.follow_replay) pool.resize(static_cast<std::size_t>(o.follow_replay));
  plan.replay = std::move(pool);
  return plan;
}

// The round's training data, one JSONL file of every sample of its shards.
void write_round_data(const config::Options& o, const RoundPlan& plan, const fs::path& file, std::int64_t vocab) {
  std::string text;
  std::vector<std::string> names;
  for (const auto& s : plan.fresh) names.push_back(s.name);
  names.insert(names.end(), plan.replay.begin(), plan.replay.end());
  for (const auto& name : names) {
    const auto ds = read_shard(fs::path(o.rollout_dir) / name, o, vocab);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      data::Sample s;
      std::vector<std::int32_t> ids(static_cast<std::size_t>(ds.length(i)));
      s.loss_mask.resize(ids.size());
      ds.copy_sample(i, ids.data(), s.loss_mask.data(), ds.length(i));
      s.input_ids.assign(ids.begin(), ids.end());
      text += data::sample_jsonl(s);
    }
  }
  util::write_file_atomic(file, text);
}

// The round's train run: publish_every steps (fewer to reach max_steps) from the draft of the round before.
config::Options round_options(const config::Options& o, const FollowState& state, const Policy& policy,
                              const fs::path& round, const fs::path& data, const std::string& heldout) {
  config::Options r = o;
  r.model_name_or_path = policy.dir.string();
  r.data_path = data.string();
  r.eval_data_path = heldout;
  r.validation_fraction = 0;
  r.output_dir = round.string();
  r.overwrite_output_dir = true;
  r.resume_from_checkpoint.clear();
  r.max_steps = o.max_steps > 0 ? std::min(o.publish_every, o.max_steps - state.steps) : o.publish_every;
  r.save_steps = 0;
  r.eval_steps = 0;
  r.min_ar = 0;
  r.max_final_loss = 0;
  r.seed = o.seed + state.rounds;
  if (!state.draft.empty()) r.init_draft = (fs::path(o.output_dir) / state.draft).string();
  return r;
}

void append_log(const fs::path& dir, const json& line) {
  std::ofstream out(dir / kLogFile, std::ios::app);
  out << line.dump() << "\n";
}

// Removes consumed shards beyond the newest keep_rollouts from the rollout folder (0: none removed).
void prune_rollouts(const config::Options& o, const FollowState& state) {
  if (o.keep_rollouts <= 0 || std::ssize(state.shards) <= o.keep_rollouts) return;
  for (std::size_t i = 0; i + static_cast<std::size_t>(o.keep_rollouts) < state.shards.size(); ++i) {
    std::error_code ec;
    if (fs::remove(fs::path(o.rollout_dir) / state.shards[i].name, ec))
      log::info("follow", "pruned the consumed shard {} (keep_rollouts {})", state.shards[i].name, o.keep_rollouts);
  }
}

// A version number never used: past the ledger's and every folder in versions/ (one a kill left unrecorded).
std::int64_t next_version(const fs::path& out, const FollowState& state) {
  const auto found = published_versions(out);
  const std::int64_t top = state.serving() ? state.serving()->version : 0;
  return std::max(top, found.empty() ? 0 : found.back()) + 1;
}

// Whether SIGINT or SIGTERM asked to stop (the handlers eagle-train installs at start-up for follow).
bool stop_requested() { return run::stop_flag()->load(); }

// Waits poll seconds, or less when a stop is asked for.
void wait(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!stop_requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

}  // namespace

void follow(const config::Options& o, const std::vector<std::string>& command_line) {
  run::install_stop_signals();  // done at start-up by eagle-train (kept: a signal caught then is not lost)
  const fs::path out = o.output_dir;
  fs::create_directories(out);
  run::DirLock lock(out / ".lock", "output_dir");
  auto state = FollowState::load(out);
  io::TensorBoardWriter tensorboard(out);
  tensorboard.session_start(state.steps);
  log::info("follow", "following {} from {}: {} round(s) done, {} step(s), {} shard(s) consumed, serving version {}",
            o.model_name_or_path, o.rollout_dir, state.rounds, state.steps, state.shards.size(),
            state.serving() ? std::to_string(state.serving()->version) : std::string("none"));
  std::set<std::string> checked;               // shards read and found sound, not yet consumed
  std::string policy_seen = state.policy_dir;  // the change to a new policy is logged once, not at every wait
  while (!stop_requested() && (o.max_steps == 0 || state.steps < o.max_steps)) {
    const auto policy = read_policy(o.model_name_or_path);
    const auto target = target::TargetConfig::from_model_dir(policy.dir.string());
    if (!policy_seen.empty() && policy.dir != policy_seen)
      log::info("follow", "policy version {} -> {}: the target is now {} (reloaded for the next round)",
                state.policy_version, policy.version, policy.dir.string());
    policy_seen = policy.dir.string();
    const auto plan = plan_round(o, state, scan(o, state, policy.version, target.vocab_size, checked), policy.version);
    if (plan.fresh.empty()) {
      log::debug("follow", "waiting for shards in {} (a round needs two new ones)", o.rollout_dir);
      wait(o.follow_poll_s);
      continue;
    }
    const auto round = out / kRoundDir;
    fs::remove_all(round);  // a round a kill interrupted: its shards are not in the ledger, it runs again
    fs::create_directories(round);
    const auto data = round / "data.jsonl";
    write_round_data(o, plan, data, target.vocab_size);
    const auto heldout = (fs::path(o.rollout_dir) / plan.heldout).string();
    auto r = round_options(o, state, policy, round / "run", data, heldout);
    std::vector<std::string> fresh_names;
    for (const auto& s : plan.fresh) fresh_names.push_back(s.name);
    log::info("follow",
              "round {} (policy version {}): {} step(s) on {} new shard(s) [{}] and {} replayed [{}]; "
              "held out {}",
              state.rounds + 1, policy.version, r.max_steps, plan.fresh.size(), fmt::join(fresh_names, ", "),
              plan.replay.size(), fmt::join(plan.replay, ", "), plan.heldout);
    for (const auto& s : plan.dropped)
      log::info("follow", "dropped the shard {} of policy version {}: more than {} version(s) behind {}", s.name,
                s.version, o.follow_max_version_lag, policy.version);
    const auto summary = train::train(r, command_line);
    // The run's StopSignals put the default handlers back when it ended: follow's own go back in at once.
    run::install_stop_signals();
    const auto checkpoint = round / "run" / fmt::format("checkpoint-{}", summary.steps);
    // The gate: the new draft and the serving one, measured alike on the held-out shard against this target.
    auto measure = r;
    measure.eval_data_path = heldout;
    measure.data_path.clear();
    const double ar = measure_ar(measure, checkpoint.string());
    const auto serving = state.serving();
    std::optional<double> serving_ar;
    if (serving) serving_ar = measure_ar(measure, (out / kVersionsDir / std::to_string(serving->version)).string());
    const bool publish_it = !serving_ar || ar >= *serving_ar - o.publish_margin;
    const std::int64_t version = next_version(out, state);
    // The next round starts from the new draft when it is published, else from the serving one.
    const auto draft_name = fmt::format("draft-{}", state.rounds + 1);
    fs::remove_all(out / draft_name);  // one a killed round left
    fs::rename(checkpoint, out / draft_name);
    const auto previous = state.draft;
    if (publish_it) {
      const auto dir = publish((out / draft_name).string(), out, version, policy.dir.string());
      state.published.push_back({version, ar, policy.version, state.rounds + 1, state.steps + summary.steps});
      log::info("follow", "published version {} at {}: AR {:.4f} on {} against {} ({})", version, dir.string(), ar,
                plan.heldout,
                serving_ar ? fmt::format("{:.4f} of version {}", *serving_ar, serving->version)
                           : std::string("no serving version"),
                serving_ar ? fmt::format("margin {}", o.publish_margin) : std::string("the first"));
      state.draft = draft_name;
    } else {
      log::warn("follow", "kept version {}: the new draft's AR {:.4f} on {} is below its {:.4f} - margin {}",
                serving->version, ar, plan.heldout, *serving_ar, o.publish_margin);
      state.draft = previous.empty() ? draft_name : previous;
    }
    state.rounds += 1;
    state.steps += summary.steps;
    state.policy_version = policy.version;
    state.policy_dir = policy.dir.string();
    for (const auto& s : plan.fresh) state.shards.push_back(s);
    for (const auto& s : plan.dropped) state.shards.push_back(s);
    state.save(out);  // the round counts from here: its shards are consumed, its draft is the next start
    json line = {{"step", state.steps},
                 {"round", state.rounds},
                 {"steps", state.steps},
                 {"policy_version", policy.version},
                 {"shards", fresh_names},
                 {"replay", plan.replay},
                 {"heldout", plan.heldout},
                 {"ar", ar},
                 {"serving_version", serving ? json(serving->version) : json()},
                 {"serving_ar", serving_ar ? json(*serving_ar) : json()},
                 {"published", publish_it},
                 {"version", state.serving() ? json(state.serving()->version) : json()}};
    if (summary.final_loss) line["loss"] = *summary.final_loss;
    if (summary.eval) line["eval_loss"] = summary.eval->loss;
    line["tokens_per_s"] = summary.tokens_per_s;
    if (summary.tflops) line["tflops"] = *summary.tflops;
    if (summary.mfu) line["mfu"] = *summary.mfu;
    append_log(out, line);
    std::vector<std::pair<std::string, float>> scalars{
        {"follow/ar", static_cast<float>(ar)},
        {"follow/policy_version", static_cast<float>(policy.version)},
        {"follow/published", publish_it ? 1.0f : 0.0f},
        {"follow/serving_version", static_cast<float>(state.serving() ? state.serving()->version : 0)}};
    if (serving_ar) scalars.emplace_back("follow/serving_ar", static_cast<float>(*serving_ar));
    if (summary.final_loss) scalars.emplace_back("follow/loss", static_cast<float>(*summary.final_loss));
    if (summary.mfu) scalars.emplace_back("follow/mfu", static_cast<float>(*summary.mfu));
    tensorboard.add_scalars(state.steps, scalars);
    io::write_report_after_run(out);
    // What the ledger no longer needs.
    for (const auto& e : fs::directory_iterator(out)) {
      const auto name = e.path().filename().string();
      if (name.rfind("draft-", 0) == 0 && name != state.draft) fs::remove_all(e.path());
    }
    fs::remove_all(round);
    if (publish_it) {
      prune_versions(out, version, o.keep_versions);
      run_publish_command(o.publish_command, out / kVersionsDir / std::to_string(version), version);
    }
    prune_rollouts(o, state);
  }
  log::info("follow", "stopped after {} round(s), {} step(s); serving version {}", state.rounds, state.steps,
            state.serving() ? std::to_string(state.serving()->version) : std::string("none"));
  EAGLE_CHECK(!stop_requested(), Error(ErrorKind::interrupted, "follow stopped by a signal between rounds")
                                     .file((out / kStateFile).string())
                                     .hint("the ledger holds every completed round: run the same command to go on"));
}

}  // namespace eagle::follow
