// fatal_signal.hpp: a process that dies of a fatal signal says where, on stderr, before it dies.
//
// A worker killed by SIGSEGV used to leave only "killed by signal 11; its stderr is empty" in the
// report. With this installed, its last stderr lines are the faulting thread's innermost frames
// (binary(symbol+offset) or binary(+offset) each: `addr2line -f -C -e binary offset` names them)
// and then "bih worker: fatal signal 11 (SEGV); ...", and the process still ends by the same
// signal, so the driver's verdict and exit handling do not change.
#pragma once

namespace bih {

// Installs the handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (once per process; later
// calls do nothing; under ASan SEGV, BUS and FPE stay ASan's). `who` begins the message.
void report_fatal_signals(const char* who);

}  // namespace bih
