// folder_lock.hpp: one process at a time in an output folder.
//
// Two `bih run`s into one --out delete each other's work folders and overwrite each other's
// reports. The first takes an exclusive flock on OUT/.lock for as long as it runs and writes its
// pid there; a second is refused with that pid. flock, not the file's existence, is the lock:
// the kernel drops it when the holder exits, however it exits, so a stale .lock never blocks.
#pragma once

#include <string>

namespace bih {

class FolderLock {
 public:
  // Creates `folder` when missing and locks it. Throws InputError naming the folder when it
  // cannot be created or written (a bad --out is the user's to fix) or when another process
  // holds the lock (naming that process's pid).
  explicit FolderLock(const std::string& folder);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace bih
