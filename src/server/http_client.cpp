// The minimal HTTP/1.1 client (see http_client.h): non-blocking sockets and poll() against one
// deadline per request, Content-Length, chunked or read-to-close bodies.
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

#include "eagle/util/error.h"

namespace eagle::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr long long kCancelPollMs = 50;  // a cancelled request returns within this (and the answer's parsing)

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

// Everything the server sends until it closes the connection (or the deadline).
std::string read_all(const Request& rq, int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      // A response with a Content-Length may be complete before the server closes.
      const auto head_end = out.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::string head = out.substr(0, head_end);
        std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
        const auto cl = head.find("\r\ncontent-length:");
        if (cl != std::string::npos) {
          const auto len = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
          if (out.size() >= head_end + 4 + len) return out;
        }
      }
    } else if (n == 0) {
      return out;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!rq.wait(fd, POLLIN))
        throw rq.fail("timed out waiting for the response", std::to_string(out.size()) + " bytes");
    } else {
      throw rq.fail("the connection failed while reading", std::strerror(errno));
    }
  }
}

std::string decode_chunked(const Request& rq, const std::string& s) {
  std::string out;
  std::size_t at = 0;
  for (;;) {
    const auto eol = s.find("\r\n", at);
    if (eol == std::string::npos) throw rq.fail("a malformed chunked response body");
    const auto size = std::strtoull(s.c_str() + at, nullptr, 16);
    if (size == 0) return out;
    if (eol + 2 + size > s.size()) throw rq.fail("the server closed the connection within a chunk");
    out.append(s, eol + 2, size);
    at = eol + 2 + size + 2;
  }
}

HttpResponse parse_response(const Request& rq, const std::string& raw) {
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos)
    throw rq.fail("not an HTTP response", raw.empty() ? "the connection closed without one" : raw.substr(0, 40));
  HttpResponse r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::string head = raw.substr(0, head_end);
  std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string body = raw.substr(head_end + 4);
  const auto cl = head.find("\r\ncontent-length:");
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    body = decode_chunked(rq, body);
  } else if (cl != std::string::npos) {
    const auto len = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
    if (body.size() < len)
      throw rq.fail("the server closed the connection within the body",
                    std::to_string(body.size()) + " of " + std::to_string(len) + " bytes");
    body.resize(len);
  }
  r.body = std::move(body);
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
                          const std::string& body, double timeout_s, const std::atomic<bool>* cancel) {
  const Request rq{url, url.prefix + path,
                   Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)),
                   cancel};
  Socket sock(connect_to(rq));
  const bool ipv6 = url.host.find(':') != std::string::npos;
  std::string req = method + " " + rq.path + " HTTP/1.1\r\nHost: " + (ipv6 ? "[" + url.host + "]" : url.host) + ":" +
                    std::to_string(url.port) + "\r\nConnection: close\r\nAccept: application/json\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  send_all(rq, sock.fd(), req);
  return parse_response(rq, read_all(rq, sock.fd()));
}

}  // namespace eagle::server
