// SIGINT/SIGTERM during training: the first signal asks the loop to stop after the current step
// (it then writes a checkpoint and exits with ExitCode::interrupted = 130); a second signal exits
// at once with _exit(130), for a run that is stuck or that the user really wants gone.
#pragma once

#include <atomic>

namespace eagle::run {

// Installs the handlers now, for a process whose work will create a StopSignals later (main calls it
// first thing for train and generate): a signal during start-up is then kept and acted on when the
// work starts, instead of killing the process with 143 and no summary. SIGINT and SIGTERM are
// unblocked in the calling thread (a blocked mask survives exec; a signal pending since before the
// handlers is delivered to them). Idempotent; async-signal-safe, so it may run before main.
void install_stop_signals();

// For a process started by a launcher (torchrun): its launcher's death is a stop request. On Linux
// PR_SET_PDEATHSIG has the kernel send SIGTERM when the parent dies, so a SIGKILL of torchrun stops
// each rank as SIGTERM does (a checkpoint, exit 130) instead of leaving it running to the end; a
// parent already gone when this runs gets the same SIGTERM at once. Call it after
// install_stop_signals. Not for a process started by hand: a run under nohup outlives its shell.
void stop_when_parent_dies();

// Set by the first SIGINT/SIGTERM while the handlers are installed (cleared with the stop request):
// for waits that poll an atomic flag (util::http_request's cancel, the feature server's file waits),
// so that a stop request interrupts them instead of waiting for their deadline.
const std::atomic<bool>* stop_flag();

// Installs the handlers for its lifetime (or adopts those of install_stop_signals, with any signal
// they caught) and restores the previous ones when destroyed. One at a
// time per process (a second instance throws Error(internal)).
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether a stop was asked for (cheap: one relaxed atomic load; check once per step).
  bool requested() const;
  // The signal number that asked (SIGINT or SIGTERM); 0 when none.
  int signal_number() const;
  // "SIGINT", "SIGTERM" or "" for the run summary's exit reason.
  const char* signal_name() const;
};

}  // namespace eagle::run
