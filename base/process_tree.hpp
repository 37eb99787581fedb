// process_tree.hpp: nothing a bih process starts outlives it, whatever it started.
//
// A process that calls become_subreaper() inherits every orphan below it: when a descendant's
// parent dies, the kernel reparents it to the nearest living subreaper ancestor instead of init.
// kill_descendants() then finds all of them: it SIGKILLs every process whose parent chain leads
// to us (read from /proc/*/stat) and reaps our children until waitpid reports ECHILD. A process
// forked while it runs is a child of one it kills, so it is reparented to us and seen on the next
// round; nothing below us can get away (short of a service manager starting it elsewhere).
//
// start_guardian() makes the pid the user started a guardian: it forks, the child does the work,
// and the parent forwards SIGINT/SIGTERM/SIGHUP to it, waits for it, kills every descendant left
// and exits with the child's status. The child has PR_SET_PDEATHSIG(SIGTERM), so a guardian
// killed outright (SIGKILL) interrupts it and it cleans up its own tree (docs/architecture.md).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace bih {

// PR_SET_CHILD_SUBREAPER on this process. Throws InfraError if the kernel refuses.
void become_subreaper();

// Whether this process is a subreaper (a test process calling the driver is not: it must not
// kill its other children).
bool is_subreaper();

// Every live process below `root` (children, their children, ...), from one /proc scan.
std::vector<pid_t> descendants(pid_t root);

// Every live (not zombie) process in process group `group`, from one /proc scan.
std::vector<pid_t> group_members(pid_t group);

// SIGKILLs every descendant of this process and reaps its children, until it has none left or
// `limit_s` passed (a process stuck in the kernel). Returns how many processes it killed.
// It reaps every child: call it only when no other thread waits for a child of ours.
int kill_descendants(double limit_s = 10);

// For verbs that start children: forks before any thread exists. Returns in the child (the
// worker of the verb, in its own process group, a subreaper, dying by SIGTERM with its parent);
// the parent never returns: it exits with the child's status once everything below it is gone.
void start_guardian();

}  // namespace bih
