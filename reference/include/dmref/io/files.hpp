// dmref/io/files.hpp: the one place where dmref reads and writes whole files
// (docs/hardening.md, "Files and processes").
//  - write_atomic: a uniquely named temporary file next to the target
//    (mkstemp: O_EXCL, never a fixed name, never through a planted symlink),
//    flushed and renamed over it; removed on failure and on SIGINT/SIGTERM
//    (install_cleanup_handlers).
//  - read_bounded: a regular file only, at most `max_bytes`, checked with
//    fstat before anything is read.
//  - check_json_depth, parse_json: JSON nesting beyond a bound is refused
//    before parsing; duplicate keys and NUL bytes are refused.
// An I/O failure is IoError (exit status 4 on the command line), bad content
// is BadInput (exit 2).
#pragma once

#include "dmref/io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dmref::io {

/// The operating system refused a read or write: one line "<path>: <what>: <why>".
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// BadInput "<path>: <field>: ..." unless `path` can take a regular file:
/// not empty, and not an existing directory, device, FIFO or socket (the
/// rename of write_atomic would replace a device node such as /dev/null, or
/// fail after the work). A symbolic link is fine: the rename replaces the
/// link, never what it points to. Commands call it before any work;
/// write_atomic calls it again.
void check_output_path(const std::string& path, const std::string& field);

/// Writes `bytes` to `path` atomically (see above). Throws IoError
/// (BadInput from check_output_path).
void write_atomic(const std::string& path, std::string_view bytes);

/// The whole of a regular file of at most max_bytes. BadInput naming `field`
/// if it cannot be opened, is not a regular file or is too large.
std::vector<std::uint8_t> read_bounded(const std::string& path, const std::string& field, std::uint64_t max_bytes);

/// JSON nesting (objects and arrays) deeper than this is refused.
inline constexpr int kMaxJsonDepth = 64;
/// BadInput "<path>: <field>: JSON nesting deeper than 64" if `text` nests
/// deeper (strings skipped); a linear scan, before any parser recursion.
void check_json_depth(std::string_view text, const std::string& path, const std::string& field);

/// Parses JSON text strictly, as every JSON dmref reads (headers, configs,
/// metadata values): nesting checked first (check_json_depth), no NUL byte
/// (nlohmann::json would stop reading at one), no duplicate key at any level
/// (a plain parser keeps the last one silently), numbers within double.
/// BadInput "<path>: <field>: not valid JSON: ..." / "duplicate key ...".
nlohmann::json parse_json(std::string_view text, const std::string& path, const std::string& field);

/// SIGINT and SIGTERM remove the temporary files being written, then end the
/// process with the signal's usual status.
void install_cleanup_handlers();

}  // namespace dmref::io
