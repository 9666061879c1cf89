// Regeneration through vLLM servers (see server_generate.h): worker threads each take the next
// sample, send its replies' completion requests one after another and hand the finished sample to
// the calling thread, which emits the samples in input order.
#include "eagle/generate/server_generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "eagle/server/http_client.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"
#include "eagle/util/progress.h"

namespace eagle::generate {
namespace {

constexpr const char* kPath = "/v1/completions";
constexpr std::size_t kHoldFactor = 4;  // samples started and not yet emitted: at most this many x in flight
constexpr auto kPollInterval = std::chrono::milliseconds(50);

// splitmix64's finalizer: a well-spread seed per (run seed, sample, turn).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Error refused(const server::HttpUrl& url, std::size_t index, const std::string& what) {
  return Error(ErrorKind::input, fmt::format("sample {}: {}", index, what))
      .file(url.text)
      .place(std::string(kPath) + ": choices[0].token_ids");
}

// The answer's token ids; refused by name when there are none (an older server, or one without
// return_token_ids) or they are not token ids of the target's vocabulary (vocab_size 0: any).
std::vector<data::TokenId> answer_tokens(const server::HttpUrl& url, std::size_t index, const nlohmann::json& j,
                                         std::int64_t vocab_size) {
  const bool has = j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
                   j["choices"][0].is_object() && j["choices"][0].contains("token_ids") &&
                   j["choices"][0]["token_ids"].is_array();
  EAGLE_CHECK(has, refused(url, index, "the server's answer has no token ids")
                       .expected("an array of the generated token ids (vLLM 0.32 or later answers return_token_ids)")
                       .found(j.dump().substr(0, 300)));
  std::vector<data::TokenId> out;
  for (const auto& t : j["choices"][0]["token_ids"]) {
    const std::int64_t end = vocab_size > 0 ? vocab_size : std::int64_t{INT32_MAX} + 1;
    EAGLE_CHECK(t.is_number_integer() && t.get<std::int64_t>() >= 0 && t.get<std::int64_t>() < end,
                refused(url, index, "the server's answer has a token id outside the target's vocabulary")
                    .expected(fmt::format("integers in [0, {}){}", end, vocab_size > 0 ? " (vocab_size)" : ""))
                    .found(t.dump())
                    .hint("the server must serve the target of --model_name_or_path"));
    out.push_back(static_cast<data::TokenId>(t.get<std::int64_t>()));
  }
  return out;
}

// The request's fields besides the prompt and max_tokens: every sampling option written out (vLLM
// otherwise applies the model's generation_config.json defaults, which in-process generate does not),
// the end ids as the only stops, and a seed per (run seed, sample, reply) when sampling.
nlohmann::json sampling_fields(const GenerateSettings& s, std::size_t index, std::int64_t turn) {
  nlohmann::json j{{"temperature", s.temperature},
                   {"top_p", s.top_p},
                   {"top_k", 0},
                   {"min_p", 0.0},
                   {"repetition_penalty", 1.0},
                   {"presence_penalty", 0.0},
                   {"frequency_penalty", 0.0},
                   {"ignore_eos", true},
                   {"stop_token_ids", s.limits.end_ids}};
  if (s.temperature > 0)
    j["seed"] = static_cast<std::int64_t>(
        mix(s.seed ^ mix(static_cast<std::uint64_t>(index) * 0x100000001B3ull + static_cast<std::uint64_t>(turn))) >>
        1);
  return j;
}

class ServerGenerator {
 public:
  ServerGenerator(server::ServerSettings settings, const server::ServedModel& model, const data::Dataset& dataset,
                  std::size_t first, const GenerateSettings& gs)
      : settings_(std::move(settings)),
        urls_(settings_),
        model_(model),
        dataset_(dataset),
        gs_(gs),
        first_(first),
        end_(dataset.size()),
        next_(first),
        next_emit_(first),
        hold_(kHoldFactor * static_cast<std::size_t>(gs.batch_size)) {}

  ~ServerGenerator() { shut_down(); }

  GenerateResult run(const EmitFn& emit, const std::function<bool()>& stop_requested) {
    const auto start = std::chrono::steady_clock::now();
    util::ProgressDisplay display("generate");
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    const auto workers = std::min<std::size_t>(static_cast<std::size_t>(gs_.batch_size), end_ - first_);
    for (std::size_t w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
    for (;;) {
      const bool more = emit_ready(emit, /*wait=*/true);
      if (!more) break;
      if (stop_requested && stop_requested()) {
        result_.interrupted = true;
        break;
      }
      show(display, elapsed(), false);
    }
    shut_down();
    emit_ready(emit, /*wait=*/false);  // what finished in order while the workers stopped
    result_.generated_tokens = tokens_;
    result_.seconds = elapsed();
    show(display, result_.seconds, true);
    if (error_) std::rethrow_exception(error_);
    return result_;
  }

 private:
  // Emits the samples finished in order; false once every sample is emitted or a worker failed.
  bool emit_ready(const EmitFn& emit, bool wait) {
    std::vector<std::pair<std::size_t, data::Regeneration>> ready;
    bool more = true;
    {
      std::unique_lock lock(mu_);
      if (wait)
        cv_.wait_for(lock, kPollInterval,
                     [&] { return error_ || (!done_.empty() && done_.begin()->first == next_emit_); });
      while (!done_.empty() && done_.begin()->first == next_emit_) {
        ready.emplace_back(next_emit_++, std::move(done_.begin()->second));
        done_.erase(done_.begin());
      }
      more = next_emit_ < end_ && !error_;
    }
    cv_.notify_all();  // workers may start more samples
    for (const auto& [index, r] : ready) {
      emit(index, r);
      ++result_.samples;
    }
    return more;
  }

  void shut_down() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cancel_ = true;
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // Sleeps wait_s seconds or until the run stops; true when it stopped.
  bool stopped(double wait_s) {
    std::unique_lock lock(mu_);
    if (wait_s > 0) cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return stop_; });
    return stop_;
  }

  void work() {
    for (;;) {
      std::size_t index = 0;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || next_ >= end_ || next_ - next_emit_ < hold_; });
        if (stop_ || next_ >= end_) return;
        index = next_++;
      }
      try {
        data::Regeneration r(dataset_.sample(index), gs_.limits);
        for (std::int64_t turn = 0; !r.finished(); ++turn) reply(index, turn, r);
        std::lock_guard lock(mu_);
        done_.emplace(index, std::move(r));
      } catch (...) {
        {
          std::lock_guard lock(mu_);
          if (!stop_ && !error_) error_ = std::current_exception();  // the first failure; later ones are its echo
          stop_ = true;
        }
        cancel_ = true;
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  }

  // One reply of sample `index`: the request (retried while the server fails transiently) and its
  // tokens accepted one by one; refused when they do not end the reply exactly at their last one.
  void reply(std::size_t index, std::int64_t turn, data::Regeneration& r) {
    const auto fields = sampling_fields(gs_, index, turn);
    const std::vector<std::int64_t> prompt(r.output().input_ids.begin(), r.output().input_ids.end());
    const server::HttpUrl* url = nullptr;
    // A request's tries go round the replicas from its first URL (not the rotation's next one).
    const auto first = urls_.start();
    const auto answer = server::with_retries(
        settings_, fmt::format("reply {} of sample {}", turn + 1, index),
        [&](std::int64_t attempt) {
          url = &urls_.at(first, attempt);
          return server::completions(*url, model_.id, prompt, r.reply_budget(), fields, settings_.timeout_s, &cancel_);
        },
        [&](double wait_s) { return stopped(wait_s); });
    const auto tokens = answer_tokens(*url, index, answer, gs_.vocab_size);
    const auto budget = r.reply_budget();
    const auto replies = r.stopped_by_end() + r.stopped_by_length();
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      if (r.stopped_by_end() + r.stopped_by_length() != replies)
        throw refused(*url, index, "the server generated past the end of the reply")
            .expected(fmt::format("the reply to end at its last token (an end id of [{}], or the budget of {} tokens)",
                                  fmt::join(gs_.limits.end_ids, ", "), budget))
            .found(fmt::format("{} tokens, the reply ended after token {} ({})", tokens.size(), k, tokens[k - 1]))
            .hint("start vLLM without stop settings of its own; generate sends ignore_eos and stop_token_ids");
      r.mark_fed();
      r.accept(tokens[k]);
    }
    tokens_ += tokens.size();
    if (r.stopped_by_end() + r.stopped_by_length() == replies) {
      const auto& c = answer["choices"][0];
      throw refused(*url, index, "the server stopped the reply early")
          .expected(
              fmt::format("{} tokens or an end id of [{}] at the end", budget, fmt::join(gs_.limits.end_ids, ", ")))
          .found(fmt::format("{} tokens, finish_reason {}, stop_reason {}", tokens.size(),
                             c.contains("finish_reason") ? c["finish_reason"].dump() : "none",
                             c.contains("stop_reason") ? c["stop_reason"].dump() : "none"))
          .hint(
              "a server default such as the model's stop_token_ids or max_tokens ended it: start vLLM with "
              "--generation-config vllm and a --max-model-len of at least training_seq_len");
    }
  }

  void show(util::ProgressDisplay& display, double elapsed_s, bool final) {
    if (!display.due(elapsed_s, final)) return;
    const double rate = static_cast<double>(tokens_) / std::max(elapsed_s, 1e-9);
    const auto done = first_ + result_.samples;
    const std::string eta = final ? ""
                                  : " | " + util::format_eta(static_cast<double>(result_.samples),
                                                             static_cast<double>(end_ - first_), elapsed_s);
    const std::string text = fmt::format("{}/{} samples | {} tokens, {:.0f} tokens/s from the server | {} elapsed{}",
                                         done, end_, tokens_.load(), rate, util::format_duration(elapsed_s), eta);
    const double frac = end_ > 0 ? static_cast<double>(done) / static_cast<double>(end_) : 1.0;
    util::ProgressLine("generate").show(display, frac, text, elapsed_s, final);
  }

  const server::ServerSettings settings_;
  server::UrlRotation urls_;
  const server::ServedModel& model_;
  const data::Dataset& dataset_;
  const GenerateSettings& gs_;
  const std::size_t first_, end_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t next_, next_emit_;                    // next sample to start, next to emit (under mu_)
  const std::size_t hold_;                          // started and not emitted at most
  std::map<std::size_t, data::Regeneration> done_;  // finished, not yet emitted (under mu_)
  bool stop_ = false;                               // under mu_
  std::exception_ptr error_;                        // under mu_
  std::atomic<bool> cancel_{false};                 // requests in flight give up
  std::atomic<std::uint64_t> tokens_{0};
  std::vector<std::thread> threads_;
  GenerateResult result_;
};

}  // namespace

GenerateResult generate_from_server(server::ServerSettings settings, const server::ServedModel& model,
                                    const data::Dataset& dataset, std::size_t first, const GenerateSettings& gs,
                                    const EmitFn& emit, const std::function<bool()>& stop_requested) {
  EAGLE_CHECK(gs.batch_size > 0 && gs.limits.context > 1 && gs.limits.max_new_tokens > 0,
              Error(ErrorKind::internal, "generate settings out of range"));
  if (first >= dataset.size()) return {};
  ServerGenerator g(std::move(settings), model, dataset, first, gs);
  return g.run(emit, stop_requested);
}

}  // namespace eagle::generate
