// eagle-train: the launcher. A static executable of a few lines that blocks SIGINT and SIGTERM and execs
// the trainer, eagle-train-core, beside it. The trainer takes tens of milliseconds to load LibTorch
// before its first instruction runs, and a stop signal in that window used to end it with 143 and no
// summary (issue 53 L2). A blocked signal survives exec and stays pending: the trainer installs its
// stop handlers first thing (.preinit_array) and unblocks, so a stop sent at any moment after this
// process starts is a stop with a summary (train, generate), or the default action for the other
// commands. Static, so there is no dynamic loading before the block either.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// Set when this launcher blocked the stop signals, so the trainer knows to unblock them (a mask its
// own parent set is left alone).
constexpr const char* kBlockedEnv = "EAGLE_TRAIN_LAUNCHER_BLOCKED";

}  // namespace

// The signal mask before the block (written by the entry point, read by main).
extern "C" {
sigset_t eagle_launcher_old_mask;
}

#if defined(__x86_64__) && defined(__linux__)
// The process's first instruction (the ELF entry, -Wl,-e): rt_sigprocmask(SIG_BLOCK, {INT, TERM}, &old, 8)
// as a raw system call, then the C library's own _start with the registers it expects (rsp untouched,
// rdx restored). glibc's start-up before .preinit_array takes a fraction of a millisecond, in which
// a stop sent right after exec still killed the launcher.
asm(R"(
  .text
  .globl eagle_launcher_entry
  .type eagle_launcher_entry, @function
eagle_launcher_entry:
  mov %rdx, %r12
  mov $14, %eax
  xor %edi, %edi
  lea eagle_launcher_stop_set(%rip), %rsi
  lea eagle_launcher_old_mask(%rip), %rdx
  mov $8, %r10d
  syscall
  mov %r12, %rdx
  jmp _start
  .section .rodata
  .align 8
eagle_launcher_stop_set:
  .quad (1 << (2 - 1)) | (1 << (15 - 1))
  .text
)");
#define EAGLE_LAUNCHER_ENTRY 1
#endif

namespace {

// Elsewhere the block comes first in .preinit_array, after the C library's start-up.
void block_stop_signals(int, char**, char**) {
#ifndef EAGLE_LAUNCHER_ENTRY
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop, &eagle_launcher_old_mask);
#endif
}
[[gnu::section(".preinit_array"), gnu::used]] void (*const kBlockFirst)(int, char**, char**) = block_stop_signals;

// The folder of this executable (/proc/self/exe: the file itself, whatever argv[0] or PATH said).
std::string own_folder() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  const std::string path(buf, static_cast<std::size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

int main(int, char** argv) {
  if (sigismember(&eagle_launcher_old_mask, SIGINT) + sigismember(&eagle_launcher_old_mask, SIGTERM) == 0)
    ::setenv(kBlockedEnv, "1", 1);
  const std::string core = own_folder() + "/eagle-train-core";
  ::execv(core.c_str(), argv);
  std::fprintf(stderr, "[error] [main] %s: cannot start the trainer: %s (it is built beside eagle-train)\n",
               core.c_str(), std::strerror(errno));
  return 1;
}
