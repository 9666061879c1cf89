// Signal handlers that set a stop flag on the first SIGINT/SIGTERM and _exit(130) on the second.
#include "eagle/run/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <atomic>
#include <cstring>

#include "eagle/util/error.h"

namespace eagle::run {
namespace {

std::atomic<int> g_signal{0};   // first signal received; 0: none
std::atomic<int> g_count{0};    // signals received
std::atomic<bool> g_stop{false};       // g_signal != 0, as the flag waits poll
std::atomic<bool> g_installed{false};  // a StopSignals is alive
std::atomic<bool> g_handlers{false};   // on_signal is installed
struct sigaction g_old_int, g_old_term;

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "signal handlers need lock-free atomics");

// Async-signal-safe: atomics, write(2) and _exit(2) only.
void write_stderr(const char* text) {
  ssize_t rc = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)rc;
}

void on_signal(int sig) {
  int n = g_count.fetch_add(1) + 1;
  if (n == 1) {
    g_signal.store(sig);
    g_stop.store(true);
    write_stderr(sig == SIGINT ? "\nSIGINT received: finishing the step, saving a checkpoint, then exiting "
                                 "(send it again to exit at once)\n"
                               : "\nSIGTERM received: finishing the step, saving a checkpoint, then exiting "
                                 "(send it again to exit at once)\n");
    return;
  }
  write_stderr("\nsecond signal: exiting at once without a checkpoint\n");
  ::_exit(static_cast<int>(ExitCode::interrupted));
}

// Installs the handlers once; the previous ones are kept for the destructor to put back.
void install_handlers() {
  if (g_handlers.exchange(true)) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads/writes of the step continue
  ::sigaction(SIGINT, &sa, &g_old_int);
  ::sigaction(SIGTERM, &sa, &g_old_term);
  // A launcher that blocked them (the mask survives exec) would leave the run deaf to a stop; one
  // pending since before the handlers existed is delivered to them now.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ::pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
}

}  // namespace

void install_stop_signals() {
  if (g_handlers.load()) return;
  g_signal.store(0);
  g_count.store(0);
  g_stop.store(false);
  install_handlers();
}

void stop_when_parent_dies() {
#ifdef __linux__
  const pid_t parent = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return;  // best effort: the run itself is unaffected
  // The parent died before the request was in place: nobody will send the signal now.
  if (::getppid() != parent) ::raise(SIGTERM);
#endif
}

StopSignals::StopSignals() {
  if (g_installed.exchange(true))
    throw Error(ErrorKind::internal, "stop-signal handlers are installed twice");
  // Handlers installed at start-up (install_stop_signals) are adopted with the signal they caught.
  if (!g_handlers.load()) {
    g_signal.store(0);
    g_count.store(0);
    g_stop.store(false);
  }
  install_handlers();
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  g_handlers.store(false);
  g_installed.store(false);
}

const std::atomic<bool>* stop_flag() { return &g_stop; }

bool StopSignals::requested() const { return g_signal.load(std::memory_order_relaxed) != 0; }
int StopSignals::signal_number() const { return g_signal.load(); }
const char* StopSignals::signal_name() const {
  switch (g_signal.load()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "";
  }
}

}  // namespace eagle::run
