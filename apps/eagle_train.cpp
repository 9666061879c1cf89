// eagle-train: trains EAGLE speculative-decoding draft heads. Everything lives in eagle_core.
#include "eagle/cli/commands.h"

namespace {

// The stop-signal handlers before anything else: the executable's .preinit_array runs before the
// initialisers of every shared library (LibTorch's take most of a second of start-up), so a
// SIGTERM in the first second is a stop with a summary (exit 130), not 143 (glibc passes argv).
void install_signals_first(int argc, char** argv, char** envp) {
  eagle::cli::install_start_up_signals(argc, argv, envp);
}
[[gnu::section(".preinit_array"), gnu::used]] void (*const kInstallSignalsFirst)(int, char**,
                                                                                 char**) = install_signals_first;

}  // namespace

int main(int argc, char** argv) { return eagle::cli::main(argc, argv); }
