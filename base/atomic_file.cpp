// atomic_file.cpp: temp file + fsync + rename, with POSIX calls so every step can be checked.
#include "base/atomic_file.hpp"

#include <fcntl.h>
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

[[noreturn]] void fail(const std::string& path, const std::string& step, int error) {
  throw InfraError("cannot write " + path + ": " + step + ": " + std::strerror(error));
}

// Creates a fresh temp file next to `target`: hidden (leading dot) so that globs for *.json in
// the report folder never pick it up. Unique per process, thread and call.
int create_temp(const fs::path& target, std::string& temp_path) {
  static std::atomic<uint64_t> counter{0};
  std::random_device entropy;
  for (int attempt = 0; attempt < 100; ++attempt) {
    // Built by appending (not "." + ...): GCC 12 warns falsely (-Wrestrict) on that operator+.
    std::string name = ".";
    name += target.filename().string();
    name += ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
            std::to_string(entropy());
    const fs::path candidate = target.parent_path() / name;
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      temp_path = candidate.string();
      return fd;
    }
    if (errno != EEXIST) fail(target.string(), "creating a temp file in its folder", errno);
  }
  fail(target.string(), "creating a temp file in its folder", EEXIST);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  const fs::path target = fs::absolute(fs::path(path));
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) throw InfraError("cannot write " + path + ": creating its folder: " + ec.message());

  std::string temp_path;
  const int fd = create_temp(target, temp_path);
  // From here on, every failure removes the temp file before throwing.
  auto abandon = [&](const std::string& step, int error, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(temp_path.c_str());
    fail(path, step, error);
  };
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      abandon("writing the temp file", errno, true);
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  if (::fsync(fd) != 0) abandon("flushing the temp file to disk", errno, true);
  if (::close(fd) != 0) abandon("closing the temp file", errno, false);
  if (::rename(temp_path.c_str(), target.c_str()) != 0) {
    abandon("renaming the temp file over it", errno, false);
  }
  // Make the rename itself durable. A failure here is not worth failing the write for: the new
  // content is already in place for every reader.
  const int dir_fd = ::open(target.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace bih
