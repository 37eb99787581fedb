// safetensors.hpp: read and write the safetensors tensor-file format.
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data section.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte
// offsets into the data section) and may hold "__metadata__" (string -> string). Opening a file
// validates the whole header against the file's size (offsets in range, sizes matching dtype x
// shape, no overlaps); every inconsistency is an InputError naming the file and the tensor.
// Reads convert BF16, F16 and F32 to bf16 (one round-to-nearest-even); writes are BF16.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/bf16.hpp"

namespace bih {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;            // as in the header: "BF16", "F16", "F32", ...
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t begin = 0;           // byte offsets into the data section, [begin, end)
  uint64_t end = 0;

  uint64_t element_count() const;
};

class SafetensorsFile {
 public:
  // Reads and validates the header; the data stays on disk until read_bf16.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }

  // The tensor `name` as bf16, read straight into `out` (resized). Throws InputError when the
  // tensor is absent, its shape differs from `expected_shape`, its dtype is not BF16/F16/F32,
  // or the file is shorter than its header claims.
  void read_bf16(const std::string& name, const std::vector<uint64_t>& expected_shape,
                 std::vector<bf16>& out) const;
  // read_bf16's checks without the read: the tensor is present, has `expected_shape` and a
  // readable dtype (its bytes are within the file: the constructor checked every offset).
  const SafetensorsEntry& check_tensor(const std::string& name,
                                       const std::vector<uint64_t>& expected_shape) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::vector<uint64_t> shape;
  const std::vector<bf16>* data = nullptr;  // element count must equal the shape's product
};

// Writes `tensors` as BF16, in the given order, to `path` (through a temporary file renamed into
// place). Throws InfraError when the file cannot be written, std::invalid_argument on a size
// mismatch (a programming error).
void write_safetensors_bf16(const std::string& path, const std::vector<TensorToWrite>& tensors,
                            const std::map<std::string, std::string>& metadata = {
                                {"format", "pt"}});

// IEEE binary16 bits -> float, exactly (subnormals, infinities and NaN included).
float half_bits_to_float(uint16_t h);

}  // namespace bih
