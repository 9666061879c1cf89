// The minimal HTTP/1.1 client (see http_client.h): non-blocking sockets and poll() against one
// deadline per request, Content-Length, chunked or read-to-close bodies within a size bound.
#include "eagle/server/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "eagle/util/error.h"

namespace eagle::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr long long kCancelPollMs = 50;  // a cancelled request returns within this (and the answer's parsing)
constexpr std::size_t kMaxHeadBytes = 64 << 10;  // the status line and header fields of an answer

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct Request {
  const HttpUrl& url;
  std::string path;
  Clock::time_point deadline;
  const std::atomic<bool>* cancel;

  Error fail(const std::string& what, const std::string& found = "") const {
    return Error(ErrorKind::output, what).file(url.text).place(path).found(found);
  }
  // An answer no server should send (malformed framing, past the size bound): input, not retried.
  Error refuse(const std::string& what, const std::string& found = "") const {
    return Error(ErrorKind::input, what).file(url.text).place(path).found(found);
  }
  // Waits for events on fd until the deadline; false when it passed. With a cancel flag, polls it
  // every kCancelPollMs and throws Error(interrupted) once it is set.
  bool wait(int fd, short events) const {
    for (;;) {
      if (cancel && cancel->load())
        throw Error(ErrorKind::interrupted, "the request was cancelled").file(url.text).place(path);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd, events, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, cancel ? kCancelPollMs : 1 << 30)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) throw fail("poll failed", std::strerror(errno));
    }
  }
};

int connect_to(const Request& rq) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(rq.url.port);
  const int rc = ::getaddrinfo(rq.url.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) throw rq.fail("cannot resolve the server's host", ::gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
      if (rq.wait(fd, POLLOUT)) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          ::freeaddrinfo(found);
          return fd;
        }
        last = std::strerror(err);
      } else {
        last = "timed out";
      }
    } else {
      last = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw rq.fail("cannot connect to the server", last);
}

void send_all(const Request& rq, int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const auto n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!rq.wait(fd, POLLOUT)) throw rq.fail("timed out sending the request");
    } else {
      throw rq.fail("the connection failed while sending", std::strerror(errno));
    }
  }
}

// A number of a header or chunk-size line: digits only (base 10 or 16), no sign, at most `limit`;
// nullopt otherwise (a value past the limit is never wrapped).
std::optional<std::uint64_t> parse_count(std::string_view text, int base, std::uint64_t limit) {
  std::uint64_t v = 0;
  if (text.empty()) return std::nullopt;
  for (const char c : text) {
    const int d = c >= '0' && c <= '9'                 ? c - '0'
                  : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : base == 16 && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                       : -1;
    if (d < 0 || static_cast<std::uint64_t>(d) > limit ||
        v > (limit - static_cast<std::uint64_t>(d)) / static_cast<std::uint64_t>(base))
      return std::nullopt;
    v = v * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(d);
  }
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// What the body's framing depends on, from the complete head (status line and header fields).
struct Head {
  std::size_t end = 0;  // offset of the body
  int status = 0;
  std::optional<std::uint64_t> length;  // Content-Length
  bool chunked = false;
};

Head parse_head(const Request& rq, const std::string& raw, std::size_t head_end, std::size_t max_body) {
  if (raw.rfind("HTTP/1.", 0) != 0) throw rq.refuse("not an HTTP response", raw.substr(0, 40));
  Head h;
  h.end = head_end + 4;
  h.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::string head = raw.substr(0, head_end) + "\r\n";
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  auto field = [&](const std::string& name) -> std::optional<std::string_view> {
    const auto at = head.find("\r\n" + name + ":");
    if (at == std::string::npos) return std::nullopt;
    const auto begin = at + name.size() + 3;
    return trim(std::string_view(head).substr(begin, head.find("\r\n", begin) - begin));
  };
  h.chunked = field("transfer-encoding").value_or("").find("chunked") != std::string_view::npos;
  if (const auto cl = field("content-length"); cl && !h.chunked) {
    h.length = parse_count(*cl, 10, std::numeric_limits<std::uint64_t>::max());
    if (!h.length) throw rq.refuse("a malformed Content-Length", std::string(*cl));
    if (*h.length > max_body)
      throw rq.refuse(fmt::format("the answer is larger than this request can return (at most {} bytes)", max_body),
                      "Content-Length " + std::to_string(*h.length));
  }
  return h;
}

// The chunked body of raw (from `at`), at most max_body bytes once decoded; every size checked
// before it is added.
std::string decode_chunked(const Request& rq, const std::string& raw, std::size_t at, std::size_t max_body) {
  std::string out;
  for (;;) {
    const auto eol = raw.find("\r\n", at);
    if (eol == std::string::npos) throw rq.fail("the server closed the connection within a chunked body");
    auto line = std::string_view(raw).substr(at, eol - at);
    line = trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
    const auto size = parse_count(line, 16, max_body - out.size());
    if (!size)
      throw rq.refuse(fmt::format("a malformed chunk size, or a body larger than this request can return (at most "
                                  "{} bytes)",
                                  max_body),
                      std::string(line.substr(0, 40)));
    if (*size == 0) return out;
    const auto data = eol + 2;
    if (raw.size() - data < *size + 2) throw rq.fail("the server closed the connection within a chunk");
    if (raw.compare(data + *size, 2, "\r\n") != 0) throw rq.refuse("a chunk not followed by CRLF");
    out.append(raw, data, *size);
    at = data + *size + 2;
  }
}

// Reads until the body is complete (Content-Length) or the server closes, within the deadline and
// the size bounds, and parses the response.
HttpResponse read_response(const Request& rq, int fd, std::size_t max_body) {
  std::string raw;
  std::optional<Head> head;
  // Chunked framing adds a size line per chunk: the raw body may exceed the decoded bound by as much.
  const std::size_t max_raw = max_body + max_body / 2 + kMaxHeadBytes;
  char buf[65536];
  for (;;) {
    // The deadline and the cancel flag bound the whole exchange, also a server that never pauses.
    if (rq.cancel && rq.cancel->load())
      throw Error(ErrorKind::interrupted, "the request was cancelled").file(rq.url.text).place(rq.path);
    if (Clock::now() >= rq.deadline)
      throw rq.fail("timed out waiting for the response", std::to_string(raw.size()) + " bytes");
    const auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      raw.append(buf, static_cast<std::size_t>(n));
      if (!head) {
        const auto end = raw.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (raw.size() > kMaxHeadBytes)
            throw rq.refuse(fmt::format("the response's head is longer than {} bytes", kMaxHeadBytes));
          continue;
        }
        head = parse_head(rq, raw, end, max_body);
      }
      const auto body = raw.size() - head->end;
      if (head->length && body >= *head->length) break;  // complete before the server closes
      if (body > max_raw)
        throw rq.refuse(fmt::format("the answer is larger than this request can return (at most {} bytes)", max_body),
                        fmt::format("more than {} bytes", max_raw));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!rq.wait(fd, POLLIN))
        throw rq.fail("timed out waiting for the response", std::to_string(raw.size()) + " bytes");
    } else {
      throw rq.fail("the connection failed while reading", std::strerror(errno));
    }
  }
  if (!head)
    throw rq.fail("not an HTTP response", raw.empty() ? "the connection closed without one" : raw.substr(0, 40));
  HttpResponse r;
  r.status = head->status;
  if (head->chunked) {
    r.body = decode_chunked(rq, raw, head->end, max_body);
  } else if (head->length) {
    const auto body = raw.size() - head->end;
    if (body < *head->length)
      throw rq.fail("the server closed the connection within the body",
                    std::to_string(body) + " of " + std::to_string(*head->length) + " bytes");
    r.body = raw.substr(head->end, *head->length);
  } else {
    if (raw.size() - head->end > max_body)
      throw rq.refuse(fmt::format("the answer is larger than this request can return (at most {} bytes)", max_body));
    r.body = raw.substr(head->end);
  }
  return r;
}

}  // namespace

HttpUrl parse_http_url(const std::string& url) {
  auto bad = [&](const std::string& what) {
    return Error(ErrorKind::usage, "not a server URL: " + what)
        .place("target_server")
        .expected("http://HOST[:PORT][/PREFIX] (no TLS)")
        .found(url);
  };
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) throw bad("it does not start with http://");
  HttpUrl u;
  u.text = url;
  std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    u.prefix = rest.substr(slash);
    while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
    rest.resize(slash);
  }
  std::string host = rest;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos) throw bad("an unclosed [ in the host");
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') throw bad("text after the host");
  } else {
    const auto colon = rest.find(':');
    host = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon);
  }
  if (host.empty()) throw bad("no host");
  u.host = host;
  if (!rest.empty()) {
    const std::string port = rest.substr(1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw bad("the port is not in 1..65535");
    u.port = std::stoi(port);
  }
  return u;
}

std::vector<HttpUrl> parse_http_urls(const std::string& list) {
  std::vector<HttpUrl> out;
  std::size_t at = 0;
  for (;;) {
    const auto comma = list.find(',', at);
    out.push_back(parse_http_url(list.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

HttpResponse http_request(const HttpUrl& url, const std::string& method, const std::string& path,
                          const std::string& body, double timeout_s, const std::atomic<bool>* cancel,
                          const std::string& request_id, std::size_t max_response_bytes) {
  const Request rq{url, url.prefix + path,
                   Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)),
                   cancel};
  Socket sock(connect_to(rq));
  const bool ipv6 = url.host.find(':') != std::string::npos;
  std::string req = method + " " + rq.path + " HTTP/1.1\r\nHost: " + (ipv6 ? "[" + url.host + "]" : url.host) + ":" +
                    std::to_string(url.port) + "\r\nConnection: close\r\nAccept: application/json\r\n";
  EAGLE_CHECK(request_id.find_first_of("\r\n") == std::string::npos,
              Error(ErrorKind::internal, "a request id with a line break").found(request_id));
  if (!request_id.empty()) req += "X-Request-Id: " + request_id + "\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  send_all(rq, sock.fd(), req);
  return read_response(rq, sock.fd(), max_response_bytes);
}

}  // namespace eagle::server
