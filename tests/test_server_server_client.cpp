// The servers' settings and retries: ServerSettings::from for the feature store and for generate; a
// request's retries go to the next URL; a failure worth another try is retried with backoff, then
// thrown as ErrorKind::source_down (exit 4, what the trainer catches to save its last step) with the
// fix; a refused request is not retried.
#include <catch2/catch.hpp>

#include <vector>

#include "eagle/config/options.h"
#include "eagle/server/server_client.h"
#include "eagle/util/error.h"

using namespace eagle;

TEST_CASE("ServerSettings::from gives the feature store's and generate's settings", "[server]") {
  config::Options o;
  o.target_server = "http://a:1,http://b:2";
  o.target_server_inflight = 3;
  o.target_server_timeout_s = 7;
  o.target_server_retries = 2;
  o.generate_batch_size = 11;
  o.target_server_storage = "/shared/hs";
  const auto f = server::ServerSettings::from(o, server::ServerPurpose::features, /*rank=*/1);
  CHECK(f.urls == o.target_server);
  CHECK(f.inflight == 3);
  CHECK(f.timeout_s == 7.0);
  CHECK(f.retries == 2);
  CHECK(f.rank == 1);
  CHECK(f.resume == "resume with --resume_from_checkpoint auto");
  CHECK(f.log_area == "data");
  CHECK(f.storage == "/shared/hs");  // the only folder whose files the store reads and deletes
  CHECK(f.cancel == nullptr);        // the caller sets the stop flag (server/ sits below run/)
  const auto g = server::ServerSettings::from(o, server::ServerPurpose::generate, /*rank=*/1);
  CHECK(g.urls == o.target_server);
  CHECK(g.inflight == 11);
  CHECK(g.timeout_s == 7.0);
  CHECK(g.retries == 2);
  CHECK(g.rank == 0);  // generate runs as one process
  CHECK(g.resume == "rerun the same command to continue where it stopped");
  CHECK(g.log_area == "generate");
  CHECK(g.storage.empty());  // generate reads no files
}

TEST_CASE("a request's tries go round the replicas from its own first URL, whatever other requests take", "[server]") {
  server::ServerSettings s;
  s.urls = "http://a:1,http://b:2,http://c:3";
  s.rank = 1;
  server::UrlRotation urls(s);
  const auto first = urls.start();  // rank 1 starts at b
  CHECK(urls.at(first, 0).host == "b");
  CHECK(urls.next().host == "c");  // another request meanwhile
  CHECK(urls.next().host == "a");
  CHECK(urls.at(first, 1).host == "c");  // the retry goes to the URL after the one that failed
  CHECK(urls.at(first, 2).host == "a");
  CHECK(urls.at(first, 3).host == "b");
}

TEST_CASE("a server that stays down after the retries is a source_down error naming the fix", "[server]") {
  server::ServerSettings s;
  s.retries = 2;
  int calls = 0;
  std::vector<double> waits;
  auto no_wait = [&](double wait_s) {
    waits.push_back(wait_s);
    return false;
  };
  auto down = [&](std::int64_t) -> int {
    ++calls;
    throw server::Transient{
        Error(ErrorKind::output, "the server failed the request").file("http://a:1").place("/v1/completions")};
  };
  try {
    server::with_retries(s, "the hidden states of sample 3", down, no_wait);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::source_down);
    CHECK(e.exit_code() == ExitCode::output);
    CHECK(e.file() == "http://a:1");
    CHECK(e.place() == "/v1/completions");
    CHECK_THAT(e.hint(), Catch::Contains("sample 3 failed 3 time(s)") &&
                             Catch::Contains("resume with --resume_from_checkpoint auto"));
  }
  CHECK(calls == 3);
  CHECK(waits == std::vector<double>{0, 1, 0, 2});  // asked before each backoff, then for it: 1 s, 2 s

  // Stopped during the backoff (the run ends anyway): the failure keeps its own kind.
  calls = 0;
  try {
    server::with_retries(s, "x", down, [](double wait_s) { return wait_s > 0; });
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::output);
  }
  CHECK(calls == 1);

  // A refused request is not tried again and keeps its kind.
  calls = 0;
  try {
    server::with_retries(
        s, "x",
        [&](std::int64_t) -> int {
          ++calls;
          throw Error(ErrorKind::input, "the server refused the request");
        },
        no_wait);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::input);
  }
  CHECK(calls == 1);
}
