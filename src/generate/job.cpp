// eagle-train generate's job (see job.h): the lock, a stopped run's leftovers, the finished or
// resumed output, then the replies regenerated in-process or by the servers, emitted and committed.
#include "eagle/generate/job.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>
#include <vector>

#include "eagle/config/option_table.h"
#include "eagle/data/loader.h"
#include "eagle/data/regeneration.h"
#include "eagle/data/sample_writer.h"
#include "eagle/device/runtime.h"
#include "eagle/generate/generate.h"
#include "eagle/generate/server_generate.h"
#include "eagle/run/dir_lock.h"
#include "eagle/run/signals.h"
#include "eagle/server/server_client.h"
#include "eagle/target/target.h"
#include "eagle/util/error.h"
#include "eagle/util/fs_sync.h"
#include "eagle/util/log.h"

namespace eagle::generate {
namespace {

constexpr double kCommitIntervalS = 1.0;  // at most this much finished work is lost to a kill

// Everything the output depends on; a resumed run must match it (batch size, device and threads may
// change between runs).
// With --target_server one more key (the servers may change between runs, not that a server writes).
nlohmann::json output_settings(const config::Options& o, const data::Dataset& ds,
                               const std::vector<std::int64_t>& end_ids) {
  nlohmann::json j{{"model_name_or_path", o.model_name_or_path},
                   {"target_dtype", config::name_of(o.target_dtype)},
                   {"data_path", o.data_path},
                   {"samples", ds.size()},
                   {"tokens", ds.total_tokens()},
                   {"training_seq_len", o.training_seq_len},
                   {"overlong_policy", config::name_of(o.overlong_policy)},
                   {"max_new_tokens", o.max_new_tokens},
                   {"temperature", o.temperature},
                   {"top_p", o.top_p},
                   {"seed", o.seed},
                   {"end_ids", end_ids}};
  if (!o.target_server.empty()) j["target"] = "server";
  return j;
}

// generate's server settings; a stop signal ends every wait of the start-up checks too.
server::ServerSettings generate_server_settings(const config::Options& o) {
  auto s = server::ServerSettings::from(o, server::ServerPurpose::generate);
  s.cancel = run::stop_flag();
  return s;
}

// The servers answer and serve a context of at least training_seq_len (else replies would be cut
// elsewhere than in-process, or refused).
server::ServedModel check_generate_servers(const config::Options& o) {
  const auto served = server::check_servers(generate_server_settings(o));
  EAGLE_CHECK(served.max_model_len == 0 || served.max_model_len >= o.training_seq_len,
              Error(ErrorKind::input, "the server's context is shorter than training_seq_len")
                  .file(o.target_server)
                  .place("/v1/models: data[0].max_model_len")
                  .expected(fmt::format("at least training_seq_len {}", o.training_seq_len))
                  .found(std::to_string(served.max_model_len))
                  .hint("start vLLM with --max-model-len of at least training_seq_len (or lower training_seq_len)"));
  return served;
}

// Temporaries of the progress file a killed run left beside the output: under the lock no live
// generate of this output writes them, so they are a dead writer's.
void remove_leftovers(const std::string& output) {
  const std::filesystem::path out(output);
  const auto folder = out.parent_path().empty() ? std::filesystem::path(".") : out.parent_path();
  const auto progress = out.filename().string() + data::kProgressSuffix;
  std::error_code ec;
  std::vector<std::filesystem::path> leftovers;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec))
    if (util::is_temporary(e.path().filename().string(), progress)) leftovers.push_back(e.path());
  for (const auto& p : leftovers) {
    std::filesystem::remove(p, ec);  // a symlink is removed as a link, never followed
    log::info("generate", "removed {}, left by a stopped run", p.string());
  }
}

}  // namespace

void regenerate(const config::Options& opts) {
  data::SampleWriter::check_output(opts.output);
  // An existing output passed check_output: a finished run recorded it. It is never written again,
  // so deciding "nothing to do" needs no lock (and works in a read-only folder).
  std::error_code ec;
  const bool finished = std::filesystem::exists(opts.output, ec);
  // One generate per output at a time (two would interleave their lines in the part file): the lock
  // beside the output is held until this process ends, as prepare's is.
  std::optional<run::DirLock> lock;
  if (!finished) {
    lock.emplace(opts.output + ".lock", "the generate output", /*beside_output=*/true);
    remove_leftovers(opts.output);
  }
  const bool server = !opts.target_server.empty();
  device::configure_runtime(opts);
  // The config alone first: the data is checked against its vocabulary, and the output's settings
  // (end ids) before the weights load.
  const auto config = target::TargetConfig::from_model_dir(opts.model_name_or_path);
  // Samples are read whole (the context limit applies per turn while generating), none held out.
  auto lo = data::LoadOptions::from(opts);
  lo.training_seq_len = std::numeric_limits<std::int64_t>::max();
  lo.validation_fraction = 0;
  lo.allow_untrained = true;
  lo.vocab_size = config.vocab_size;
  lo.media_tokens = config.media_tokens;  // a multimodal target's placeholders: text-only data
  const data::Dataset dataset = data::load_dataset(opts.data_path, lo).train;
  if (data::is_prepared_dataset(opts.data_path))
    log::info("generate", "{}: regenerating its train split (its validation.bin is a --data_path of its own)",
              opts.data_path);
  const auto end_ids = target::generation_end_ids(opts.model_name_or_path, config);
  if (end_ids.empty())
    log::warn("generate", "the target names no eos_token_id: every reply runs to max_new_tokens ({})",
              opts.max_new_tokens);

  if (finished) {
    const auto counts = data::RegenerationCounts::from_json(
        data::SampleWriter::finished(opts.output, output_settings(opts, dataset, end_ids)),
        opts.output + data::kProgressSuffix);
    log::info("generate", "{} is complete ({} samples: {} regenerated, {} copied, {} dropped): nothing to do",
              opts.output, counts.samples, counts.regenerated, counts.copied, counts.dropped);
    return;
  }
  // With servers the weights are never loaded: the config and the end ids above are all it reads.
  const auto served = server ? std::optional(check_generate_servers(opts)) : std::nullopt;
  data::SampleWriter writer(opts.output, output_settings(opts, dataset, end_ids));
  auto counts = data::RegenerationCounts::from_json(writer.resumed_counts(), opts.output + data::kProgressSuffix);
  const auto first = writer.samples_done();
  std::optional<target::TargetModel> target;
  if (!server) target.emplace(target::load_target(opts, device::resolve_device(opts.device)));
  auto settings = GenerateSettings::from(opts, end_ids);
  settings.vocab_size = config.vocab_size;  // a server's token ids are checked against it
  log::info("generate",
            "{} samples from {} ({} done before), {}, context {}, up to {} tokens per reply, {}, "
            "end ids [{}]",
            dataset.size(), opts.data_path, first,
            server ? fmt::format("written by the server {} (model \"{}\"), {} requests in flight", opts.target_server,
                                 served->id, settings.batch_size)
                   : fmt::format("{} rows", settings.batch_size),
            settings.limits.context, settings.limits.max_new_tokens,
            opts.temperature > 0 ? fmt::format("temperature {} top_p {}", opts.temperature, opts.top_p) : "greedy",
            fmt::join(end_ids, ", "));

  run::StopSignals signals;
  auto last_commit = std::chrono::steady_clock::now();
  auto emit = [&](std::size_t, const data::Regeneration& r) {
    if (r.outcome() == data::Outcome::dropped)
      writer.skip();
    else
      writer.write(r.output());
    counts.add(r);
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_commit).count() >= kCommitIntervalS) {
      writer.commit(counts.to_json());
      last_commit = now;
    }
  };
  auto stop = [&] { return signals.requested(); };
  GenerateResult result;
  try {
    result = server
                 ? generate_from_server(generate_server_settings(opts), *served, dataset, first, settings, emit, stop)
                 : generate(*target, dataset, first, settings, emit, stop);
  } catch (const Error&) {
    writer.commit(counts.to_json());  // the samples emitted before the failure stay done
    throw;
  }
  if (result.interrupted) {
    writer.commit(counts.to_json());
    throw Error(ErrorKind::interrupted, fmt::format("stopped by {} after {} of {} samples", signals.signal_name(),
                                                    writer.samples_done(), dataset.size()))
        .file(opts.output + data::kPartSuffix)
        .hint("rerun the same command to continue where it stopped");
  }
  writer.finish(counts.to_json());

  log::info("generate",
            "wrote {}: {} samples: {} regenerated ({} cut at the context), {} copied unchanged (no "
            "trained token or no prompt), {} dropped (a prompt longer than the context)",
            opts.output, counts.samples, counts.regenerated, counts.truncated, counts.copied, counts.dropped);
  log::info("generate",
            "{} tokens generated; replies stopped by an end id: {}, by length: {}; this run: {} tokens in "
            "{:.1f} s ({:.0f} tokens/s){}",
            counts.generated_tokens, counts.stopped_by_end, counts.stopped_by_length, result.generated_tokens,
            result.seconds, static_cast<double>(result.generated_tokens) / std::max(result.seconds, 1e-9),
            result.graphed_shapes ? fmt::format(", {} decode shapes as CUDA graphs", result.graphed_shapes) : "");
}

}  // namespace eagle::generate
