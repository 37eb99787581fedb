// safetensors.cpp: header validation, dtype conversion and the BF16 writer.
#include "models/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "base/json_text.hpp"

namespace bih {
namespace {

using Json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader reads it in place");
static_assert(sizeof(bf16) == 2, "bf16 must be exactly its 16 bits to be read in place");

// The safetensors reference implementation refuses headers above 100 MB; so do we, so that a
// corrupt length does not make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Bytes per element of every dtype the format defines (sizes are validated for all of them;
// only BF16, F16 and F32 can be read).
int dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string tensor_pointer(const std::string& name) { return "/" + json_pointer_token(name); }

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// Product of dims, or false on overflow past 2^63.
bool checked_product(const std::vector<uint64_t>& shape, uint64_t& out) {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d != 0 && n > (uint64_t{1} << 62) / d) return false;
    n *= d;
  }
  out = n;
  return true;
}

}  // namespace

float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: mantissa * 2^-24, exact in float.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(bits);
}

uint64_t SafetensorsEntry::element_count() const {
  uint64_t n = 0;
  if (!checked_product(shape, n)) throw std::overflow_error("tensor element count overflows");
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(path, "", "cannot read the safetensors file: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the safetensors file");
  if (file_size < 8) {
    throw InputError(
        path, "",
        "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  }
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | length_bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    throw InputError(path, "",
                     "header length " + std::to_string(header_len) +
                         " (u64 little-endian at byte 0) exceeds the file's remaining " +
                         std::to_string(file_size - 8) + " bytes (or the 100 MB limit)");
  }
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  if (!in) throw InputError(path, "", "could not read the JSON header");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  // The header is strict JSON (no comments); a tensor named twice is refused, not last-wins.
  const Json j = parse_json_text<Json>(header, path + " (JSON header)", {.comments = false});
  if (!j.is_object()) throw InputError(path, "", "header must be a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const std::string where = tensor_pointer(name);
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw InputError(path, where, "__metadata__ must be an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          throw InputError(path, where + "/" + m.key(), "metadata values must be strings");
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "': ";
    if (!v.is_object()) throw InputError(path, where, what + "entry must be an object");
    SafetensorsEntry e;
    e.name = name;
    auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string() || dtype_bytes(dtype->get<std::string>()) == 0) {
      throw InputError(path, where + "/dtype",
                       what + "missing or unknown dtype; expected e.g. \"BF16\", \"F16\", \"F32\"");
    }
    e.dtype = dtype->get<std::string>();
    auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array()) {
      throw InputError(path, where + "/shape", what + "missing shape; expected an array of ints");
    }
    for (const Json& d : *shape) {
      if (!d.is_number_unsigned()) {
        throw InputError(path, where + "/shape",
                         what + "shape entries must be non-negative integers, got " + d.dump());
      }
      e.shape.push_back(d.get<uint64_t>());
    }
    auto offsets = v.find("data_offsets");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      throw InputError(path, where + "/data_offsets",
                       what + "expected data_offsets [begin, end] of non-negative integers");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.begin > e.end) {
      throw InputError(path, where + "/data_offsets", what + "begin > end");
    }
    uint64_t count = 0;
    // The byte count must not wrap either: [2^62] F32 "needs" 2^64 = 0 bytes, and would pass the
    // size check with data_offsets [0, 0] only to make read_bf16 allocate 2^62 elements.
    if (!checked_product(e.shape, count) ||
        count > std::numeric_limits<uint64_t>::max() / dtype_bytes(e.dtype)) {
      throw InputError(path, where + "/shape", what + "element count overflows");
    }
    const uint64_t expected_bytes = count * static_cast<uint64_t>(dtype_bytes(e.dtype));
    if (e.end - e.begin != expected_bytes) {
      throw InputError(path, where + "/data_offsets",
                       what + "spans " + std::to_string(e.end - e.begin) + " bytes but " + e.dtype +
                           " " + shape_string(e.shape) + " needs " +
                           std::to_string(expected_bytes));
    }
    if (e.end > data_size) {
      throw InputError(path, where + "/data_offsets",
                       what + "data ends at byte " + std::to_string(e.end) +
                           " of the data section, which has only " + std::to_string(data_size) +
                           " bytes (truncated file?)");
    }
    entries_.emplace(name, std::move(e));
  }

  // Tensors must not share bytes: a writer bug that would silently alias two weights.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [name, e] : entries_) {
    if (e.end > e.begin) by_offset.push_back(&e);
  }
  std::sort(
      by_offset.begin(), by_offset.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      throw InputError(
          path, tensor_pointer(by_offset[i]->name) + "/data_offsets",
          "tensor '" + by_offset[i]->name + "' overlaps tensor '" + by_offset[i - 1]->name + "'");
    }
  }
}

const SafetensorsEntry& SafetensorsFile::check_tensor(
    const std::string& name, const std::vector<uint64_t>& expected_shape) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw InputError(path_, tensor_pointer(name), "tensor '" + name + "' is missing");
  }
  const SafetensorsEntry& e = it->second;
  if (e.shape != expected_shape) {
    throw InputError(path_, tensor_pointer(name) + "/shape",
                     "tensor '" + name + "' has shape " + shape_string(e.shape) +
                         "; the model config expects " + shape_string(expected_shape));
  }
  if (e.dtype != "BF16" && e.dtype != "F16" && e.dtype != "F32") {
    throw InputError(
        path_, tensor_pointer(name) + "/dtype",
        "tensor '" + name + "' has dtype " + e.dtype + "; readable dtypes are BF16, F16, F32");
  }
  return e;
}

void SafetensorsFile::read_bf16(const std::string& name,
                                const std::vector<uint64_t>& expected_shape,
                                std::vector<bf16>& out) const {
  const SafetensorsEntry& e = check_tensor(name, expected_shape);
  const uint64_t count = e.element_count();
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw InputError(path_, "", "cannot reopen the safetensors file");
  in.seekg(static_cast<std::streamoff>(data_start_ + e.begin));
  out.resize(count);
  auto fail = [&] {
    return InputError(
        path_, tensor_pointer(name),
        "tensor '" + name + "': could not read its bytes (file changed or truncated)");
  };
  if (e.dtype == "BF16") {
    // Straight into the destination: no staging copy of a possibly multi-GB tensor.
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * 2));
    if (!in) throw fail();
    return;
  }
  // F16/F32: convert through a bounded staging buffer.
  const int width = dtype_bytes(e.dtype);
  constexpr uint64_t kChunk = 1 << 16;
  std::vector<unsigned char> buffer(kChunk * width);
  for (uint64_t done = 0; done < count;) {
    uint64_t n = std::min(kChunk, count - done);
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(n * width));
    if (!in) throw fail();
    for (uint64_t k = 0; k < n; ++k) {
      float f;
      if (width == 4) {
        std::memcpy(&f, buffer.data() + 4 * k, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, buffer.data() + 2 * k, 2);
        f = half_bits_to_float(h);
      }
      out[done + k] = to_bf16(f);
    }
    done += n;
  }
}

void write_safetensors_bf16(const std::string& path, const std::vector<TensorToWrite>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the tensors in the order written, so the header reads like the data.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    uint64_t count = 0;
    if (t.data == nullptr || !checked_product(t.shape, count) || count != t.data->size()) {
      throw std::invalid_argument("write_safetensors_bf16: tensor '" + t.name +
                                  "' data size does not match shape " + shape_string(t.shape));
    }
    header[t.name] = {
        {"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 2 * count}}};
    offset += 2 * count;
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (the format allows trailing space).
  while ((8 + text.size()) % 8 != 0) text += ' ';

  // Through a hidden temp file renamed into place: a full disk or a crash leaves no partial file
  // at `path` and no partial temp file at all (AtomicFileWriter removes it on failure).
  AtomicFileWriter out(path);
  unsigned char length_bytes[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(length_bytes, 8);
  out.write(text.data(), text.size());
  for (const TensorToWrite& t : tensors) out.write(t.data->data(), 2 * t.data->size());
  out.commit();
}

}  // namespace bih
