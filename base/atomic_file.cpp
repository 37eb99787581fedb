// atomic_file.cpp: temp file + fsync + rename, with POSIX calls so every step can be checked.
#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "base/errors.hpp"

namespace bih {
namespace {

namespace fs = std::filesystem;

constexpr size_t kNameMax = 255;  // NAME_MAX of Linux file systems
constexpr const char* kTempMarker = ".bih-tmp-";

// errno text, with what ENOSPC and EDQUOT mean for the user.
std::string error_text(int error) {
  std::string text = std::strerror(error);
  if (error == ENOSPC) text += " (the disk is full)";
  if (error == EDQUOT) text += " (the disk quota is used up)";
  if (error == EFBIG) text += " (the file size limit was reached)";
  return text;
}

[[noreturn]] void fail(const std::string& path, const std::string& step, int error) {
  throw InfraError("cannot write " + path + ": " + step + ": " + error_text(error));
}

void fsync_folder(const fs::path& folder) {
  // Durability of the rename. A failure here is not worth failing the write for: the new
  // content is already in place for every reader.
  const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace

std::string temp_name_for(const std::string& target_name, const std::string& tag) {
  const std::string suffix = kTempMarker + std::to_string(::getpid()) + "-" + tag;
  const size_t room = kNameMax - 1 - suffix.size();
  // Built by appending (not "." + ...): GCC 12 warns falsely (-Wrestrict) on that operator+.
  std::string name = ".";
  name += target_name.substr(0, room);
  name += suffix;
  return name;
}

std::optional<long> temp_name_pid(const std::string& name) {
  if (name.empty() || name[0] != '.') return std::nullopt;
  for (const char* marker_text : {kTempMarker, ".tmp-"}) {
    const std::string marker = marker_text;
    const size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0) continue;
    size_t i = at + marker.size();
    long pid = 0;
    size_t digits = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 9) {
      pid = pid * 10 + (name[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0 || pid <= 0 || (i < name.size() && name[i] != '-')) continue;
    return pid;
  }
  return std::nullopt;
}

size_t remove_stale_temps(const std::string& folder) {
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const auto pid = temp_name_pid(it->path().filename().string());
    if (!pid || *pid == ::getpid()) continue;
    // kill(pid, 0) fails with ESRCH only when no such process exists; EPERM means it lives.
    if (::kill(static_cast<pid_t>(*pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code remove_ec;
    if (fs::remove_all(it->path(), remove_ec) > 0 && !remove_ec) ++removed;
  }
  return removed;
}

AtomicFileWriter::AtomicFileWriter(const std::string& path)
    : target_(fs::absolute(fs::path(path)).string()) {
  const fs::path target(target_);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) fail("creating its folder", ec.value());
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    const std::string tag = std::to_string(counter++) + "-" + std::to_string(entropy());
    temp_ = (target.parent_path() / temp_name_for(target.filename().string(), tag)).string();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) {
      committed_ = true;  // nothing of ours to remove
      fail("creating a temp file in its folder", errno);
    }
  }
  if (fd_ < 0) {
    committed_ = true;
    fail("creating a temp file in its folder", EEXIST);
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFileWriter::fail(const std::string& step, int error) {
  // Remove the partial temp file now, not only at destruction: the caller may hold this writer
  // while it reports the error, and a full disk needs the space back.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_) ::unlink(temp_.c_str());
  committed_ = true;
  bih::fail(target_, step, error);
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) fail("writing the temp file", EBADF);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing the temp file", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) fail("committing the temp file", EBADF);
  if (::fsync(fd_) != 0) fail("flushing the temp file to disk", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing the temp file", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("renaming the temp file over it", errno);
  committed_ = true;
  fsync_folder(fs::path(target_).parent_path());
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFileWriter out(path);
  out.write(content.data(), content.size());
  out.commit();
}

}  // namespace bih
