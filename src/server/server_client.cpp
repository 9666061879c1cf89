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
                         const std::string& body, double timeout_s, const std::atomic<bool>* cancel) {
  try {
    return http_request(url, method, path, body, timeout_s, cancel);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::interrupted) throw;
    throw Transient{e};
  }
}

nlohmann::json completions(const HttpUrl& url, const std::string& model, const std::vector<std::int64_t>& prompt_ids,
                           std::int64_t max_tokens, const nlohmann::json& extra, double timeout_s,
                           const std::atomic<bool>* cancel) {
  constexpr const char* kPath = "/v1/completions";
  nlohmann::json body = extra.is_null() ? nlohmann::json::object() : extra;
  body["model"] = model;
  body["prompt"] = prompt_ids;
  body["max_tokens"] = max_tokens;
  body["return_token_ids"] = true;
  return parse_json(url, kPath, try_request(url, "POST", kPath, body.dump(), timeout_s, cancel));
}

ServedModel check_servers(const ServerSettings& s) {
  const auto urls = parse_http_urls(s.urls);
  ServedModel out;
  auto no_stop = [](double wait_s) {
    if (wait_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    return false;
  };
  for (const auto& url : urls) {
    with_retries(
        s, fmt::format("GET {}/health", url.text),
        [&](std::int64_t) {
          const auto r = try_request(url, "GET", "/health", "", s.timeout_s);
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
          return parse_json(url, "/v1/models", try_request(url, "GET", "/v1/models", "", s.timeout_s));
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
    const std::int64_t len = m.contains("max_model_len") && m["max_model_len"].is_number_integer()
                                 ? m["max_model_len"].get<std::int64_t>()
                                 : 0;
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
