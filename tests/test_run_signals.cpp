// Stop signals (run/signals.h): the first SIGINT/SIGTERM sets the flag, handlers are restored, a
// signal before the StopSignals is kept, and the second one exits at once (in a forked child).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "eagle/run/signals.h"
#include "eagle/util/error.h"

using namespace eagle::run;

TEST_CASE("the first SIGINT/SIGTERM sets the stop flag; handlers are restored", "[run]") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    StopSignals stop;
    CHECK_FALSE(stop.requested());
    CHECK(stop.signal_number() == 0);
    CHECK(std::string(stop.signal_name()).empty());
    CHECK_THROWS_AS(StopSignals(), eagle::Error);
    ::raise(SIGTERM);
    CHECK(stop.requested());
    CHECK(stop.signal_number() == SIGTERM);
    CHECK(std::string(stop.signal_name()) == "SIGTERM");
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
  {
    StopSignals stop;  // a new run starts clear
    CHECK_FALSE(stop.requested());
    ::raise(SIGINT);
    CHECK(std::string(stop.signal_name()) == "SIGINT");
  }
}

TEST_CASE("handlers installed at start-up keep a signal for the StopSignals that comes later", "[run]") {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  eagle::run::install_stop_signals();
  ::raise(SIGTERM);  // the process survives: the handler sets the flag
  {
    StopSignals stop;
    CHECK(stop.requested());
    CHECK(std::string(stop.signal_name()) == "SIGTERM");
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
}

TEST_CASE("a second signal exits at once with 130", "[run]") {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: only async-signal-safe work until it exits.
    StopSignals stop;
    ::raise(SIGINT);
    if (!stop.requested()) ::_exit(10);
    ::raise(SIGTERM);
    ::_exit(11);  // not reached when the second signal exits
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(WEXITSTATUS(status) == static_cast<int>(eagle::ExitCode::interrupted));
}
