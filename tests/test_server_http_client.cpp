// The HTTP client of --target_server: URLs parsed or refused by name, a refused connection and a
// server that never answers end by their deadline with an error naming the URL and the path; a
// cancelled request ends at once.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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

}  // namespace

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
