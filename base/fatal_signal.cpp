// fatal_signal.cpp: see fatal_signal.hpp. The handler only calls async-signal-safe functions
// (write, backtrace_symbols_fd, raise) plus backtrace, whose one unsafe step (loading libgcc's
// unwinder) is done at install time.
#include "base/fatal_signal.hpp"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIH_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(BIH_ASAN)
#define BIH_ASAN 1
#endif
#ifndef BIH_ASAN
#define BIH_ASAN 0
#endif

namespace bih {
namespace {

const char* g_who = "bih";
std::atomic<bool> g_installed{false};

void write_text(const char* text) {
  size_t left = strlen(text);
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

// The driver quotes a dead worker's last 12 stderr lines (harness/driver.cpp), so the frames come
// first, innermost first and at most kFrames of them, and the line that names the signal last.
constexpr int kFrames = 10;

void on_fatal_signal(int sig) {
  char number[16];  // the signal's number in decimal, without snprintf (not signal-safe)
  int at = sizeof number - 1;
  number[at] = '\0';
  int v = sig;
  do {
    number[--at] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  void* frames[kFrames + 1];
  const int count = backtrace(frames, kFrames + 1);
  if (count > 1) backtrace_symbols_fd(frames + 1, count - 1, STDERR_FILENO);  // not this handler
  write_text(g_who);
  write_text(": fatal signal ");
  write_text(number + at);
  write_text(" (");
  write_text(sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?");
  write_text(
      "); the faulting thread's innermost frames are the stderr lines just before this one "
      "(addr2line -f -C -e BINARY OFFSET names each)\n");
  // SA_RESETHAND restored the default action: the process ends by this signal, as it would have.
  raise(sig);
}

}  // namespace

void report_fatal_signals(const char* who) {
  if (g_installed.exchange(true)) return;
  g_who = who;
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  // An own stack for the installing thread, so its stack overflowing can still be reported.
  static char alternate[64 * 1024];
  stack_t stack{};
  stack.ss_sp = alternate;
  stack.ss_size = sizeof alternate;
  sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  action.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
#if BIH_ASAN
  // ASan reports its own SEGV, BUS and FPE (with shadow memory in the report): leave them to it.
  for (int sig : {SIGILL, SIGABRT}) sigaction(sig, &action, nullptr);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(sig, &action, nullptr);
#endif
}

}  // namespace bih
