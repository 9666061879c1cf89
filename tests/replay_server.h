// A small HTTP server inside a test that replays a recorded vLLM hidden-states server
// (scripts/record_vllm_server.py, tests/fixtures/vllm-server/): GET /health, GET /v1/models and
// POST /v1/completions answered with the recorded bodies; each completion copies the recorded
// hidden-states file into the server's storage folder under a fresh name beside its .lock, as
// vLLM's ExampleHiddenStatesConnector does (cmpl-X-REQUEST-ID-0-SUFFIX.safetensors), and answers that path. A fixture
// without hidden_states/ is a recorded generation server (record_vllm_server.py --generate): each completion is
// answered with the response recorded for exactly its request body (any other body: HTTP 400 "no recorded answer", so a
// changed request format fails). A thread with a socket on 127.0.0.1, stopped (connections refused) by stop() or the
// destructor.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace eagle::test {

class ReplayServer {
 public:
  ReplayServer(const std::filesystem::path& fixture, const std::filesystem::path& storage)
      : fixture_(fixture), storage_(storage) {
    std::filesystem::create_directories(storage_);
    models_ = slurp(fixture_ / "models.json");
    generation_ = !std::filesystem::exists(fixture_ / "hidden_states");
    std::ifstream in(fixture_ / "responses.jsonl");
    std::size_t row = 0;
    for (std::string line; std::getline(in, line); ++row) {
      if (line.empty()) continue;
      const auto rec = nlohmann::json::parse(line);
      auto answer = nlohmann::json::parse(rec["response"].get<std::string>());
      if (generation_)
        answers_[rec["request"].dump()] = {rec.value("status", 200), std::move(answer)};
      else
        records_[rec["request"]["prompt"].get<std::vector<std::int64_t>>()] = {std::move(answer), row};
    }
    start();
  }
  ~ReplayServer() { stop(); }
  ReplayServer(const ReplayServer&) = delete;
  ReplayServer& operator=(const ReplayServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // Completion requests answered so far, and received so far.
  int completions() const { return completions_; }
  int requests() const { return requests_; }
  // Answers every completion with this HTTP status instead (0: the recorded answer).
  void fail_with(int status) { fail_status_ = status; }
  // Holds every completion answer this long first (a server busy generating; stop() ends the wait).
  void delay_answers(int ms) { delay_ms_ = ms; }
  // Answers completions with this HTTP status once `answered` completions were answered.
  void fail_after(int answered, int status) {
    fail_after_ = answered;
    fail_later_status_ = status;
  }
  // Edits every recorded completion answer before it is sent (e.g. to drop a field).
  void edit_answers(std::function<void(nlohmann::json&)> f) {
    std::lock_guard lock(mu_);
    edit_ = std::move(f);
  }
  // Edits the /v1/models answer (e.g. a max_model_len of another JSON type).
  void edit_models(const std::function<void(nlohmann::json&)>& f) {
    std::lock_guard lock(mu_);
    auto j = nlohmann::json::parse(models_);
    f(j);
    models_ = j.dump();
  }
  // Closes the listening socket: connections are refused until start() (same port).
  void stop() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    thread_.join();
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  void start() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 64) != 0)
      throw std::runtime_error("replay server: cannot listen");
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    stopping_ = false;
    thread_ = std::thread([this] { serve(); });
  }

 private:
  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  void serve() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      handle(fd);
      ::close(fd);
    }
  }

  void handle(int fd) {
    std::string req;
    char buf[65536];
    std::size_t need = std::string::npos;
    while (need == std::string::npos || req.size() < need) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) return;
      const auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      req.append(buf, static_cast<std::size_t>(n));
      const auto head = req.find("\r\n\r\n");
      if (head != std::string::npos && need == std::string::npos) {
        const auto cl = req.find("Content-Length: ");
        need = head + 4 + (cl != std::string::npos && cl < head ? std::stoul(req.substr(cl + 16)) : 0);
      }
    }
    const auto body = req.substr(req.find("\r\n\r\n") + 4);
    if (req.rfind("GET /health ", 0) == 0) return reply(fd, 200, "");
    if (req.rfind("GET /v1/models ", 0) == 0) {
      std::lock_guard lock(mu_);
      return reply(fd, 200, models_);
    }
    if (req.rfind("POST /v1/completions ", 0) != 0) return reply(fd, 404, R"({"error": "no such route"})");
    ++requests_;
    if (fail_status_ != 0) return reply(fd, fail_status_, R"({"error": "replayed failure"})");
    if (fail_later_status_ != 0 && completions_ >= fail_after_)
      return reply(fd, fail_later_status_, R"({"error": "replayed failure"})");
    for (int waited = 0; waited < delay_ms_ && !stopping_; waited += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto j = nlohmann::json::parse(body);
    if (generation_) return answer_generation(fd, j);
    const auto it = records_.find(j["prompt"].get<std::vector<std::int64_t>>());
    if (it == records_.end()) return reply(fd, 400, R"({"error": "no recorded answer for this prompt"})");
    auto answer = it->second.first;
    // vLLM's name: the engine request id (cmpl-, the X-Request-Id header or a random id, -0 for the first
    // prompt) and a random suffix.
    const int n = ++completions_;
    const auto file = storage_ / ("cmpl-" + header(req, "x-request-id", "random" + std::to_string(n)) + "-0-" +
                                  std::to_string(10000000 + n) + ".safetensors");
    std::filesystem::copy_file(
        fixture_ / "hidden_states" / ("hs_" + std::to_string(it->second.second) + ".safetensors"), file);
    std::ofstream(file.string() + ".lock").put('\0');
    answer["kv_transfer_params"]["hidden_states_path"] = file.string();
    {
      std::lock_guard lock(mu_);
      if (edit_) edit_(answer);
    }
    reply(fd, 200, answer.dump());
  }

  void answer_generation(int fd, const nlohmann::json& request) {
    const auto it = answers_.find(request.dump());
    if (it == answers_.end()) return reply(fd, 400, R"({"error": "no recorded answer for this request"})");
    auto answer = it->second.second;
    ++completions_;
    {
      std::lock_guard lock(mu_);
      if (edit_) edit_(answer);
    }
    reply(fd, it->second.first, answer.dump());
  }

  // The value of a request header (name in lower case), or `otherwise`.
  static std::string header(const std::string& req, const std::string& name, const std::string& otherwise) {
    std::string head = req.substr(0, req.find("\r\n\r\n"));
    std::string lower = head;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto at = lower.find("\r\n" + name + ":");
    if (at == std::string::npos) return otherwise;
    auto begin = at + 3 + name.size();
    while (begin < head.size() && head[begin] == ' ') ++begin;
    return head.substr(begin, head.find("\r\n", begin) - begin);
  }

  static void reply(int fd, int status, const std::string& body) {
    const std::string text = "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
                             "\r\ncontent-type: application/json\r\ncontent-length: " + std::to_string(body.size()) +
                             "\r\nconnection: close\r\n\r\n" + body;
    std::size_t sent = 0;
    while (sent < text.size()) {
      const auto n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }

  std::filesystem::path fixture_, storage_;
  std::string models_;
  std::map<std::vector<std::int64_t>, std::pair<nlohmann::json, std::size_t>> records_;
  bool generation_ = false;
  std::map<std::string, std::pair<int, nlohmann::json>> answers_;  // request body (dumped): status, answer
  int listen_fd_ = -1, port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> completions_{0}, fail_status_{0}, fail_after_{0}, fail_later_status_{0}, delay_ms_{0}, requests_{0};
  std::mutex mu_;
  std::function<void(nlohmann::json&)> edit_;
  std::thread thread_;
};

}  // namespace eagle::test
