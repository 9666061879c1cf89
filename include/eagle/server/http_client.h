// A minimal HTTP/1.1 client over POSIX sockets (no TLS): one request per connection, every wait
// bounded by a deadline, for the trainer's requests to a vLLM server (train --target_server).
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace eagle::server {

// http://HOST[:PORT][/PREFIX]: the server; PREFIX (without a trailing slash) goes before every path.
struct HttpUrl {
  std::string host;
  int port = 80;
  std::string prefix;
  std::string text;  // as given
};
// Error(usage) naming the URL and what is wrong (not http://, no host, a bad port).
HttpUrl parse_http_url(const std::string& url);
// A comma-separated list of URLs, each parsed; empty entries are refused.
std::vector<HttpUrl> parse_http_urls(const std::string& list);

// The default bound of an answer's body: /health, /v1/models and other small JSON answers.
constexpr std::size_t kMaxAnswerBytes = 1 << 20;
// The bound of a completion answer with return_token_ids for `tokens` prompt and generated tokens: 1 MiB
// plus 256 bytes per token (a token id, its text escaped as JSON and vLLM's fields around them take
// far less).
constexpr std::size_t completion_answer_bytes(std::size_t tokens) { return kMaxAnswerBytes + 256 * tokens; }

struct HttpResponse {
  int status = 0;
  std::string body;
};

// One request on a fresh connection (Connection: close); body sent as application/json when not
// empty. Every step (resolve, connect, send, each read) ends by timeout_s after the call began.
// Throws Error(output) naming the URL and path: cannot connect, timed out, closed early, a malformed
// response. Any HTTP status is returned, not thrown. A non-null `cancel` is polled at least every
// 100 ms while waiting: once it is true, throws Error(interrupted) naming the URL and path (a long
// generation request never delays Ctrl-C). A non-empty request_id is sent as the X-Request-Id header
// (vLLM names the request, and the connector its hidden-states file, after it). The answer's body may
// hold at most max_response_bytes (its head 64 KiB): a Content-Length above, a malformed one, a chunk
// size that would pass it (sizes are overflow-checked) or more bytes are refused as Error(input), not
// a failure to retry; the deadline bounds the whole exchange however fast the server sends.
HttpResponse http_request(const HttpUrl& url, const std::string& method, const std::string& path,
                          const std::string& body, double timeout_s, const std::atomic<bool>* cancel = nullptr,
                          const std::string& request_id = "", std::size_t max_response_bytes = kMaxAnswerBytes);

}  // namespace eagle::server
