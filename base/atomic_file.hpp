// atomic_file.hpp: write a file so that readers see either the old content or the new, never half.
//
// Reports are written this way (DESIGN.md, "Reports"): a crash mid-write leaves at most a stray
// hidden temp file, never a truncated report that the matrix or the gate would misread.
#pragma once

#include <string>

namespace bih {

// Writes `content` to a temp file in the folder of `path` (created with its parents if missing),
// fsyncs it, renames it over `path` and fsyncs the folder. The file gets mode 0666 minus the
// umask, like any newly created file. On any failure the temp file is removed and InfraError says
// which step failed and why (errno text).
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace bih
