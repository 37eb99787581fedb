// folder_lock.cpp: flock on FOLDER/.lock (folder_lock.hpp).
#include "base/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "base/errors.hpp"

namespace bih {

FolderLock::FolderLock(const std::string& folder) {
  namespace fs = std::filesystem;
  const std::string valid = "valid: a folder bih can create and write (--out)";
  std::error_code ec;
  if (folder.empty()) throw InputError("--out is empty; " + valid);
  if (fs::exists(folder, ec) && !fs::is_directory(folder, ec)) {
    throw InputError(folder, "", "exists and is not a folder; " + valid);
  }
  fs::create_directories(folder, ec);
  if (ec) throw InputError(folder, "", "cannot create the folder: " + ec.message() + "; " + valid);
  const std::string path = (fs::path(folder) / ".lock").string();
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw InputError(
        folder, "",
        "cannot write in the folder (" + path + ": " + std::strerror(errno) + "); " + valid);
  }
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = pread(fd_, pid, sizeof pid - 1, 0);
    close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      const std::string holder = n > 0 ? std::string(pid, strcspn(pid, "\n")) : "unknown";
      throw InputError(folder, "",
                       "another bih run (pid " + holder +
                           ") is writing into this folder; valid: "
                           "wait for it to finish, or give this run another --out");
    }
    throw InputError(folder, "", "cannot lock " + path + ": " + std::strerror(err) + "; " + valid);
  }
  // Ours now: leave our pid for the message a second run prints.
  const std::string text = std::to_string(getpid()) + "\n";
  const bool wrote = ftruncate(fd_, 0) == 0 &&
                     pwrite(fd_, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
  (void)wrote;  // the lock holds without the pid; a second run then names the holder "unknown"
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) close(fd_);  // closing drops the flock
}

}  // namespace bih
