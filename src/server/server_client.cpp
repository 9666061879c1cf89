// The requests of --target_server (see server_client.h).
#include "eagle/server/server_client.h"

namespace eagle::server {

ServerSettings ServerSettings::from(const config::Options& o, ServerPurpose purpose, std::int64_t rank) {
  ServerSettings s;
  s.urls = o.target_server;
  s.timeout_s = static_cast<double>(o.target_server_timeout_s);
  s.retries = o.target_server_retries;
  if (purpose == ServerPurpose::features) {
    s.inflight = o.target_server_inflight;
    s.rank = rank;
    s.storage = o.target_server_storage;
  } else {
    s.inflight = o.generate_batch_size;
    s.resume = "rerun the same command to continue where it stopped";
    s.log_area = "generate";
  }
  return s;
}

nlohmann::json parse_json(const HttpUrl& url, const std::string& path, const HttpResponse& r) {
  if (r.status >= 500 || r.status == 429)
    throw Transient{Error(ErrorKind::output, "the server failed the request")
                        .file(url.text)
                        .place(path)
                        .found(fmt::format("HTTP {}: {}", r.status, r.body.substr(0, 300)))};
  EAGLE_CHECK(r.status == 200, Error(ErrorKind::input, "the server refused the request")
                                   .file(url.text)
                                   .place(path)
                                   .found(fmt::format("HTTP {}: {}", r.status, r.body.substr(0, 300))));
  auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  EAGLE_CHECK(!j.is_discarded() && j.is_object(), Error(ErrorKind::input, "the server's answer is not a JSON object")
                                                      .file(url.text)
                                                      .place(path)
                                                      .found(r.body.substr(0, 300)));
  return j;
}

HttpResponse try_request(const HttpUrl& url, const std::string& method, const std::string& path,
                         const std::string& body, double timeout_s, const std::atomic<bool>* cancel,
                         const std::string& request_id, std::size_t max_response_bytes) {
  try {
    return http_request(url, method, path, body, timeout_s, cancel, request_id, max_response_bytes);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::interrupted || e.kind() == ErrorKind::input) throw;  // cancelled, or refused
    throw Transient{e};
  }
}

nlohmann::json completions(const HttpUrl& url, const std::string& model, const std::vector<std::int64_t>& prompt_ids,
                           std::int64_t max_tokens, const nlohmann::json& extra, double timeout_s,
                           const std::atomic<bool>* cancel, const std::string& request_id) {
  constexpr const char* kPath = "/v1/completions";
  nlohmann::json body = extra.is_null() ? nlohmann::json::object() : extra;
  body["model"] = model;
  body["prompt"] = prompt_ids;
  body["max_tokens"] = max_tokens;
  body["return_token_ids"] = true;
  // The answer holds the prompt's and the reply's token ids (and the reply's text): its size bound.
  const auto bound =
      completion_answer_bytes(prompt_ids.size() + static_cast<std::size_t>(std::max<std::int64_t>(max_tokens, 0)));
  return parse_json(url, kPath, try_request(url, "POST", kPath, body.dump(), timeout_s, cancel, request_id, bound));
}

void sleep_unless_cancelled(double wait_s, const std::atomic<bool>* cancel, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  for (;;) {
    if (cancel && cancel->load()) throw Error(ErrorKind::interrupted, "stopped while waiting").place(what);
    const Clock::duration left = end - Clock::now();
    if (left <= Clock::duration::zero()) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
}

ServedModel check_servers(const ServerSettings& s) {
  const auto urls = parse_http_urls(s.urls);
  ServedModel out;
  auto no_stop = [&](double wait_s) {
    sleep_unless_cancelled(wait_s, s.cancel, "the start-up checks of the servers");
    return false;
  };
  for (const auto& url : urls) {
    with_retries(
        s, fmt::format("GET {}/health", url.text),
        [&](std::int64_t) {
          const auto r = try_request(url, "GET", "/health", "", s.timeout_s, s.cancel);
          if (r.status != 200)
            throw Transient{Error(ErrorKind::output, "the server is not healthy")
                                .file(url.text)
                                .place("/health")
                                .found(fmt::format("HTTP {}", r.status))};
          return 0;
        },
        no_stop);
    const auto j = with_retries(
        s, fmt::format("GET {}/v1/models", url.text),
        [&](std::int64_t) {
          return parse_json(url, "/v1/models", try_request(url, "GET", "/v1/models", "", s.timeout_s, s.cancel));
        },
        no_stop);
    EAGLE_CHECK(j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object() &&
                    j["data"][0].contains("id") && j["data"][0]["id"].is_string(),
                Error(ErrorKind::input, "the server lists no model")
                    .file(url.text)
                    .place("/v1/models: data[0].id")
                    .found(j.dump().substr(0, 300)));
    const std::string id = j["data"][0]["id"];
    const auto& m = j["data"][0];
    // Not reported: 0 (another server); reported, it must be a positive integer (a string or a negative
    // value would silently skip the context checks).
    EAGLE_CHECK(!m.contains("max_model_len") ||
                    (m["max_model_len"].is_number_integer() && m["max_model_len"].get<std::int64_t>() > 0),
                Error(ErrorKind::input, "the server reports a max_model_len that is not a context length")
                    .file(url.text)
                    .place("/v1/models: data[0].max_model_len")
                    .expected("a positive integer")
                    .found(m.contains("max_model_len") ? m["max_model_len"].dump() : ""));
    const std::int64_t len = m.contains("max_model_len") ? m["max_model_len"].get<std::int64_t>() : 0;
    EAGLE_CHECK(out.id.empty() || out.id == id,
                Error(ErrorKind::input, "the servers serve different models")
                    .file(url.text)
                    .place("/v1/models: data[0].id")
                    .expected(fmt::format("\"{}\" (the first server's)", out.id))
                    .found(fmt::format("\"{}\"", id))
                    .hint("every --target_server URL must be a replica of the same target"));
    out.id = id;
    if (len > 0) out.max_model_len = out.max_model_len ? std::min(out.max_model_len, len) : len;
  }
  return out;
}

}  // namespace eagle::server
