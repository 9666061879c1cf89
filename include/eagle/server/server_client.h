// The requests of --target_server to vLLM servers, for the feature store (features/server_store.h)
// and generate (generate/server_generate.h): the settings, the start-up checks of the servers (GET
// /health, /v1/models), the one completion request, JSON answers, and retries with backoff for the
// failures worth another try.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "eagle/config/options.h"
#include "eagle/server/http_client.h"
#include "eagle/util/error.h"
#include "eagle/util/log.h"

namespace eagle::server {

// Who asks the servers: the feature store of train and eval, or generate.
enum class ServerPurpose { features, generate };

struct ServerSettings {
  std::string urls;           // target_server: comma-separated
  std::int64_t inflight = 8;  // requests in flight at most (and samples held ahead)
  double timeout_s = 120;     // one request, the lock wait included
  std::int64_t retries = 5;   // per request after the first try, with backoff 1, 2, 4, ... 30 s
  std::int64_t rank = 0;      // under torchrun each rank starts at another URL
  // How to continue after the servers stayed down (the hint of with_retries' last error), and the
  // log area of its warnings.
  std::string resume = "resume with --resume_from_checkpoint auto";
  std::string log_area = "data";
  // train/eval: the server's shared_storage_path (target_server_storage; from() sets it): every file
  // it names must lie directly in it. The request ids this process sends start with request_prefix
  // (its files are named after them; the caller sets it, features::server_request_prefix).
  std::string storage;
  std::string request_prefix;
  // Polled by every wait (requests, lock waits, backoff): once true they end with Error(interrupted).
  // The stop-signal flag (run::stop_flag, set by the caller: server/ sits below run/), or null.
  const std::atomic<bool>* cancel = nullptr;

  // The options' --target_server settings. features: target_server_inflight requests, `rank` the
  // process's rank under torchrun; generate: generate_batch_size requests, rank 0, and the hint and
  // log area of generate.
  static ServerSettings from(const config::Options& o, ServerPurpose purpose, std::int64_t rank = 0);
};

// Sleeps wait_s seconds in slices of 50 ms; throws Error(interrupted) naming `what` once cancel (when
// not null) is set.
void sleep_unless_cancelled(double wait_s, const std::atomic<bool>* cancel, const std::string& what);

// The servers of settings.urls taken in turn, rank r starting at its r-th, so that ranks and
// requests spread over the replicas; next() and start() may be called from any thread.
class UrlRotation {
 public:
  explicit UrlRotation(const ServerSettings& s) : urls_(parse_http_urls(s.urls)), rank_(s.rank) {}
  const HttpUrl& next() { return at(start(), 0); }
  // A request's first URL (its index in the rotation); try `attempt` of it goes to the URL after the
  // one that failed (at(first, attempt)), so its retries reach every replica, whatever other
  // requests take meanwhile.
  std::int64_t start() { return rank_ + next_++; }
  const HttpUrl& at(std::int64_t first, std::int64_t attempt) const {
    return urls_[static_cast<std::size_t>((first + attempt) % static_cast<std::int64_t>(urls_.size()))];
  }

 private:
  std::vector<HttpUrl> urls_;
  std::int64_t rank_;
  std::atomic<std::int64_t> next_{0};
};

// What the servers serve (GET /health and /v1/models of every URL, the same model on all).
struct ServedModel {
  std::string id;
  std::int64_t max_model_len = 0;  // 0: not reported
};
// Error(source_down, exit 4) naming the URL when a server does not answer after the retries;
// Error(input) when the servers serve other models.
ServedModel check_servers(const ServerSettings& s);

// A failure worth another try (the server down, busy or slow), unlike a refused request.
struct Transient {
  Error error;
};

// The answer's JSON object: HTTP 5xx and 429 are Transient, another status than 200 and a body that
// is not a JSON object Error(input) naming the URL and the path.
nlohmann::json parse_json(const HttpUrl& url, const std::string& path, const HttpResponse& r);
// http_request with its errors (connect, timeouts, closed connections) as Transient; a cancelled
// request (Error interrupted) and a refused answer (Error input: malformed, past its size bound) are not.
HttpResponse try_request(const HttpUrl& url, const std::string& method, const std::string& path,
                         const std::string& body, double timeout_s, const std::atomic<bool>* cancel = nullptr,
                         const std::string& request_id = "", std::size_t max_response_bytes = kMaxAnswerBytes);

// One POST /v1/completions: the prompt as token ids, max_tokens and return_token_ids for `model`,
// plus the fields of `extra` (an object: sampling options); the answer as parse_json gives it, a
// failed request as try_request's. A non-empty request_id goes as the X-Request-Id header; the
// answer's body is bounded by completion_answer_bytes(prompt + max_tokens).
nlohmann::json completions(const HttpUrl& url, const std::string& model, const std::vector<std::int64_t>& prompt_ids,
                           std::int64_t max_tokens, const nlohmann::json& extra, double timeout_s,
                           const std::atomic<bool>* cancel = nullptr, const std::string& request_id = "");

// Runs f with retries and backoff: a Transient failure is tried again up to s.retries times, then
// becomes the error as ErrorKind::source_down (exit 4: the server stays down). stop() interrupts the
// backoff.
template <typename F, typename Stop>
auto with_retries(const ServerSettings& s, const std::string& what, F&& f, Stop&& stop, std::int64_t* retries = nullptr)
    -> decltype(f(0)) {
  for (std::int64_t attempt = 0;; ++attempt) {
    try {
      return f(attempt);
    } catch (const Transient& t) {
      if (attempt >= s.retries || stop(0.0))
        throw t.error.as(ErrorKind::source_down)
            .hint(fmt::format("{} failed {} time(s); start the server again (or check --target_server) and {}", what,
                              attempt + 1, s.resume));
      const double backoff = std::min(30.0, static_cast<double>(1LL << std::min<std::int64_t>(attempt, 5)));
      log::warn(s.log_area, "{} (try {} of {}): {}; again in {:.0f} s", what, attempt + 1, s.retries + 1,
                t.error.format(), backoff);
      if (retries) ++*retries;
      if (stop(backoff)) throw Error(t.error);
    }
  }
}

}  // namespace eagle::server
