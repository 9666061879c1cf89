// A minimal HTTP/1.1 client over POSIX sockets (no TLS): one request per connection, every wait
// bounded by a deadline, for the trainer's requests to a vLLM server (train --target_server).
#pragma once

#include <atomic>
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

struct HttpResponse {
  int status = 0;
  std::string body;
};

// One request on a fresh connection (Connection: close); body sent as application/json when not
// empty. Every step (resolve, connect, send, each read) ends by timeout_s after the call began.
// Throws Error(output) naming the URL and path: cannot connect, timed out, closed early, a malformed
// response. Any HTTP status is returned, not thrown. A non-null `cancel` is polled at least every
// 100 ms while waiting: once it is true, throws Error(interrupted) naming the URL and path (a long
// generation request never delays Ctrl-C).
HttpResponse http_request(const HttpUrl& url, const std::string& method, const std::string& path,
                          const std::string& body, double timeout_s, const std::atomic<bool>* cancel = nullptr);

}  // namespace eagle::server
