// dmref/io/safetensors.hpp: reading and writing safetensors files, the format
// of dmref's golden fixtures (docs/fixtures.md, "File format").
//
// A file is an 8-byte little-endian header length N, N bytes of JSON header,
// then the byte buffer. The reader checks every field before it uses it and
// reports the first problem as BadInput, one line "<path>: <field>: <problem>".
// The writer is deterministic: the same File gives the same bytes.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dmref::io {

/// A file that is not a valid safetensors file, or lacks what the caller
/// needs. what() is one line: "<path>: <field>: <problem>".
class BadInput : public std::runtime_error {
 public:
  BadInput(std::string path, std::string field, std::string problem);
  const std::string& path() const noexcept { return path_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string path_, field_, problem_;
};

/// One tensor: row-major values decoded to double (exact for every dtype; I64
/// values must lie in [-2^53, 2^53]).
struct Tensor {
  std::string dtype;                // "F64", "F32", "F16", "BF16" or "I64"
  std::vector<std::int64_t> shape;  // [] is a scalar; a 0 extent is an empty tensor
  std::vector<double> values;       // product(shape) values, row-major
};

/// A whole file. `source` is where it was read from (used in error messages;
/// empty for a File built in memory, never written).
struct File {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
  std::string source;
};

/// The dtypes dmref reads and writes, and their sizes in bytes (0 if unknown).
std::size_t dtype_size(std::string_view dtype);
/// Number of elements of a shape (1 for []). Throws std::invalid_argument on a
/// negative extent or overflow.
std::int64_t element_count(const std::vector<std::int64_t>& shape);

/// The row-major multi-index of flat index k in a tensor of `shape` (a zero
/// extent gives index 0 on that axis): the one unflatten of dmref (reader
/// messages, verify's failures, the generator's bound messages).
std::vector<std::int64_t> unflatten(std::int64_t k, const std::vector<std::int64_t>& shape);

/// Reads and checks a file. Throws BadInput naming the first problem.
File read(const std::string& path);
/// Parses the bytes of a file; `path` only names it in messages.
File parse(const std::vector<std::uint8_t>& bytes, const std::string& path);

/// The exact bytes write() stores: header keys sorted, header padded with
/// spaces to a multiple of 8 bytes, tensors laid out contiguously in
/// name order, little-endian; F32/F16/BF16 values rounded to nearest even
/// (dmref/dtype.hpp); "__metadata__" present only if metadata is non-empty.
/// Throws std::invalid_argument ("safetensors: <field>: ...") for an invalid
/// File (unknown dtype, negative extent, wrong value count, non-integer or
/// out-of-range I64 value, a tensor named "__metadata__").
std::vector<std::uint8_t> serialize(const File& file);

/// Writes serialize(file) to a temporary file in the same directory, flushes
/// it to disk and renames it over `path`: `path` is either left as it was or
/// holds the complete new file. Throws std::invalid_argument as serialize
/// does, std::runtime_error ("<path>: write: ...") on I/O failure.
void write(const std::string& path, const File& file);

/// The tensor `name`; BadInput "<source>: "<name>": missing ..." if absent.
const Tensor& get(const File& file, const std::string& name);
/// The tensor `name`, which must have exactly `shape`; BadInput
/// "<source>: "<name>".shape: [..], expected [..]" otherwise.
const Tensor& get(const File& file, const std::string& name, const std::vector<std::int64_t>& shape);

/// Throws BadInput "<source>: "<name>"[i,j]: NaN (finite data required)" at
/// the first non-finite value of tensor `name` (or if it is missing).
void require_finite(const File& file, const std::string& name);

}  // namespace dmref::io
