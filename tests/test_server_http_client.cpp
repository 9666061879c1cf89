// The HTTP client of --target_server: URLs parsed or refused by name, a refused connection and a
// server that never answers end by their deadline with an error naming the URL and the path; a
// cancelled request ends at once; hostile answers (chunk sizes that wrap, endless or oversized
// bodies, a negative Content-Length) are refused by name within the answer's size bound.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "eagle/server/http_client.h"
#include "eagle/util/error.h"

using namespace eagle;

namespace {

// A socket on 127.0.0.1 that listens and never answers (the backlog accepts connections), and its URL.
std::pair<int, server::HttpUrl> silent_listener() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return {fd, server::parse_http_url("http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)))};
}

// A server on 127.0.0.1 that answers one request with whatever `answer` writes to the connection
// (a hostile answer), then closes it.
class OneAnswer {
 public:
  explicit OneAnswer(std::function<void(int fd, const std::atomic<bool>& stop)> answer) {
    auto [fd, url] = silent_listener();
    fd_ = fd;
    url_ = url;
    thread_ = std::thread([this, answer = std::move(answer)] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const auto n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      answer(c, stop_);
      ::close(c);
    });
  }
  ~OneAnswer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  const server::HttpUrl& url() const { return url_; }

 private:
  int fd_ = -1;
  server::HttpUrl url_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

bool send_text(int fd, const std::string& s) {
  return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
}

}  // namespace

TEST_CASE("hostile answers end fast as refusals: chunk sizes near 2^64, endless bodies, bad Content-Length",
          "[server]") {
  const auto t0 = std::chrono::steady_clock::now();
  SECTION("a chunk size that wraps the bounds check") {
    OneAnswer peer([](int fd, const std::atomic<bool>&) {
      send_text(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFF0\r\nabc\r\n0\r\n\r\n");
    });
    CHECK_THROWS_WITH(server::http_request(peer.url(), "GET", "/v1/models", "", 10),
                      Catch::Contains("a malformed chunk size") && Catch::Contains("FFFFFFFFFFFFFFF0"));
  }
  SECTION("chunks adding up past the bound") {
    OneAnswer peer([](int fd, const std::atomic<bool>&) {
      std::string chunks;
      for (int i = 0; i < 3; ++i) chunks += "80000\r\n" + std::string(0x80000, 'x') + "\r\n";  // 3 x 512 KiB
      send_text(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + "0\r\n\r\n");
    });
    const auto e = [&] {
      try {
        server::http_request(peer.url(), "GET", "/v1/models", "", 10);
      } catch (const Error& e) {
        return e;
      }
      FAIL("no error");
      return Error(ErrorKind::internal, "");
    }();
    CHECK(e.exit_code() == ExitCode::input);  // refused, not a server to try again
    CHECK_THAT(e.format(), Catch::Contains("at most 1048576 bytes"));
  }
  SECTION("an endless body without a length") {
    OneAnswer peer([](int fd, const std::atomic<bool>& stop) {
      send_text(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
      const std::string block(1 << 16, 'x');
      while (!stop && send_text(fd, block)) {
      }
    });
    CHECK_THROWS_WITH(server::http_request(peer.url(), "GET", "/v1/models", "", 30, nullptr, "", 4 << 20),
                      Catch::Contains("larger than this request can return (at most 4194304 bytes)"));
  }
  SECTION("a Content-Length above the bound is refused before its body is read") {
    OneAnswer peer([](int fd, const std::atomic<bool>&) {
      send_text(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
    });
    CHECK_THROWS_WITH(server::http_request(peer.url(), "GET", "/v1/models", "", 10),
                      Catch::Contains("Content-Length 1000000000000") && Catch::Contains("at most 1048576"));
  }
  SECTION("Content-Length -1 is named as sent") {
    OneAnswer peer(
        [](int fd, const std::atomic<bool>&) { send_text(fd, "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}"); });
    try {
      server::http_request(peer.url(), "GET", "/v1/models", "", 10);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK_THAT(e.format(), Catch::Contains("a malformed Content-Length") && Catch::Contains("-1"));
      CHECK_THAT(e.format(), !Catch::Contains("18446744073709551615"));
    }
  }
  SECTION("a valid chunked answer still reads") {
    OneAnswer peer([](int fd, const std::atomic<bool>&) {
      send_text(
          fd,
          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{\"a\r\n4\r\n\": 1\r\n1\r\n}\r\n0\r\n\r\n");
    });
    const auto r = server::http_request(peer.url(), "GET", "/v1/models", "", 10);
    CHECK(r.status == 200);
    CHECK(r.body == "{\"a\": 1}");
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // never a hang
}

TEST_CASE("server URLs are parsed or refused by name", "[server]") {
  const auto u = server::parse_http_url("http://127.0.0.1:8000/prefix/");
  CHECK(u.host == "127.0.0.1");
  CHECK(u.port == 8000);
  CHECK(u.prefix == "/prefix");
  CHECK(server::parse_http_url("http://[::1]:9").host == "::1");
  CHECK(server::parse_http_url("http://h").port == 80);
  CHECK(server::parse_http_urls("http://a:1,http://b:2").size() == 2);
  CHECK_THROWS_WITH(server::parse_http_url("https://a"), Catch::Contains("http://"));
  CHECK_THROWS_WITH(server::parse_http_url("http://a:99999"), Catch::Contains("1..65535"));
  CHECK_THROWS_WITH(server::parse_http_urls("http://a:1,"), Catch::Contains("not a server URL"));
  CHECK_THROWS_WITH(server::parse_http_url("http://:80"), Catch::Contains("no host"));
}

TEST_CASE("a refused connection and a silent server end by the deadline, naming the URL", "[server]") {
  const auto [fd, url] = silent_listener();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    server::http_request(url, "GET", "/health", "", 0.3);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == ExitCode::output);
    CHECK_THAT(e.format(), Catch::Contains("timed out") && Catch::Contains(url.text) && Catch::Contains("/health"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  ::close(fd);
  try {
    server::http_request(url, "GET", "/health", "", 2);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.format(), Catch::Contains("cannot connect to the server"));
  }
}

TEST_CASE("a cancelled request ends within 100 ms as interrupted, naming the URL, long before its deadline",
          "[server]") {
  const auto [fd, url] = silent_listener();
  std::atomic<bool> cancel{false};
  std::chrono::steady_clock::time_point cancelled;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancelled = std::chrono::steady_clock::now();
    cancel = true;
  });
  try {
    server::http_request(url, "POST", "/v1/completions", "{}", 60, &cancel);
    FAIL("no error");
  } catch (const Error& e) {
    const auto waited = std::chrono::steady_clock::now() - cancelled;
    CHECK(e.exit_code() == ExitCode::interrupted);
    CHECK_THAT(e.format(),
               Catch::Contains("cancelled") && Catch::Contains(url.text) && Catch::Contains("/v1/completions"));
    CHECK(waited < std::chrono::milliseconds(100));
  }
  canceller.join();
  // Not cancelled, the same request waits for its deadline as before.
  cancel = false;
  CHECK_THROWS_WITH(server::http_request(url, "GET", "/health", "", 0.2, &cancel), Catch::Contains("timed out"));
  ::close(fd);
}
