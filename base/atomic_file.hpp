// atomic_file.hpp: write a file so that readers see either the old content or the new, never half.
//
// Reports are written this way (DESIGN.md, "Reports"), and so are exported models: a crash
// mid-write leaves at most a stray hidden temp file, never a truncated file that a reader would
// misread. Temp files are named ".<name>.bih-tmp-<pid>-<n>-<random>" (the name part shortened so
// that the whole stays within NAME_MAX), so that a later run can tell whose they are and remove
// those whose process is gone (remove_stale_temps).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace bih {

// Writes `content` to a temp file in the folder of `path` (created with its parents if missing),
// fsyncs it, renames it over `path` and fsyncs the folder. The file gets mode 0666 minus the
// umask, like any newly created file. On any failure the temp file is removed and InfraError says
// which step failed and why (errno text; a full disk says "No space left on device (the disk is
// full)").
void write_file_atomically(const std::string& path, const std::string& content);

// write_file_atomically for content produced piece by piece (a model of gigabytes): open, write
// as often as needed, commit(). Destruction without commit() removes the temp file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  void write(const void* data, size_t size);
  // fsync, rename over the target, fsync the folder.
  void commit();
  const std::string& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& step, int error);

  std::string target_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// A hidden temp name for `target_name` in the same folder: ".<target_name>.bih-tmp-<pid>-<tag>",
// with <target_name> cut so that the result has at most 255 bytes (NAME_MAX).
std::string temp_name_for(const std::string& target_name, const std::string& tag);

// The pid in a name temp_name_for made (or the older ".<name>.tmp-<pid>" form); nullopt for any
// other name.
std::optional<long> temp_name_pid(const std::string& name);

// Removes (recursively) the entries directly in `folder` whose names are temp names of a process
// that no longer exists on this machine. Returns how many were removed; never throws (a temp it
// cannot remove stays for the next try).
size_t remove_stale_temps(const std::string& folder);

}  // namespace bih
