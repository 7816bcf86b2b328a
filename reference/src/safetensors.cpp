// safetensors reader and writer (dmref/io/safetensors.hpp; the format is
// specified in docs/fixtures.md, "File format").
#include "dmref/io/safetensors.hpp"

#include "dmref/dtype.hpp"
#include "dmref/io/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dmref::io {

namespace {

using json = nlohmann::json;

/// Headers longer than this are refused before parsing (the limit of the
/// reference implementation, huggingface/safetensors).
constexpr std::uint64_t kMaxHeader = 100'000'000;
/// I64 values must be exact doubles: |v| <= 2^53.
constexpr std::int64_t kMaxExactInt = std::int64_t{1} << 53;

/// Control characters written as \xNN, so that a message stays on one line.
std::string one_line(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

/// A tensor or metadata name as a JSON string (quoted, escaped).
std::string quote(const std::string& name) {
  return json(name).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Row-major multi-index of flat index k, as "[i,j,...]".
std::string index_string(const std::vector<std::int64_t>& shape, std::int64_t k) {
  return shape_string(unflatten(k, shape));
}

std::string type_of(const json& j) { return j.type_name(); }

/// A JSON value for a message, cut to 40 characters.
std::string brief(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

std::string source_of(const File& f) { return f.source.empty() ? "<memory>" : f.source; }

template <class U>
U load_le(const std::uint8_t* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= static_cast<U>(p[i]) << (8 * i);
  return v;
}

template <class U>
void store_le(std::vector<std::uint8_t>& out, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::invalid_argument invalid(const std::string& field, const std::string& problem) {
  return std::invalid_argument(one_line("safetensors: " + field + ": " + problem));
}

/// A header entry after its own checks, before the layout checks.
struct Entry {
  std::string name;
  std::uint64_t begin, end;
};

/// Parses and checks a tensor entry of the header; returns its layout.
Entry parse_entry(const std::string& path, const std::string& name, const json& e, std::uint64_t buffer_size,
                  Tensor* t) {
  const std::string q = quote(name);
  auto bad = [&](const std::string& field, const std::string& problem) { return BadInput(path, field, problem); };
  if (!e.is_object()) throw bad(q, "not a JSON object (it is " + type_of(e) + ")");
  for (const auto& [key, value] : e.items()) {
    (void)value;
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw bad(q, "unexpected key " + quote(key) + " (an entry has only dtype, shape and data_offsets)");
    }
  }
  // dtype
  if (!e.contains("dtype")) throw bad(q + ".dtype", "missing");
  const json& dt = e["dtype"];
  if (!dt.is_string()) throw bad(q + ".dtype", "not a string (it is " + type_of(dt) + ")");
  t->dtype = dt.get<std::string>();
  const std::size_t size = dtype_size(t->dtype);
  if (size == 0) throw bad(q + ".dtype", "unsupported dtype " + quote(t->dtype) + " (dmref reads BF16, F16, F32, F64, I64)");
  // shape
  if (!e.contains("shape")) throw bad(q + ".shape", "missing");
  const json& sh = e["shape"];
  if (!sh.is_array()) throw bad(q + ".shape", "not an array (it is " + type_of(sh) + ")");
  for (std::size_t i = 0; i < sh.size(); ++i) {
    const json& x = sh[i];
    const std::string f = q + ".shape[" + std::to_string(i) + "]";
    if (x.is_number_unsigned()) {
      if (x.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw bad(f, x.dump() + " is too large");
      }
      t->shape.push_back(x.get<std::int64_t>());
    } else if (x.is_number_integer() && x.get<std::int64_t>() >= 0) {
      t->shape.push_back(x.get<std::int64_t>());  // "-0": the integer 0, as Python's json reads it
    } else if (x.is_number_integer()) {
      throw bad(f, x.dump() + " is negative");
    } else if (x.is_number_float()) {
      throw bad(f, x.dump() + " is not an integer");
    } else {
      throw bad(f, "not an integer (it is " + type_of(x) + ")");
    }
  }
  std::int64_t count = 1;
  for (const std::int64_t n : t->shape) {
    if (n != 0 && count > std::numeric_limits<std::int64_t>::max() / n) {
      throw bad(q + ".shape", shape_string(t->shape) + " has more elements than fit in 63 bits");
    }
    count *= n;
  }
  if (count > std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(size)) {
    throw bad(q + ".shape", shape_string(t->shape) + " of " + t->dtype + " has more bytes than fit in 63 bits");
  }
  // The non-zero extents too (an empty [0, 2^63-1]), as float64 values (8
  // bytes, how both readers hold them): numpy's rule for an array's shape, so
  // that the Python reader gives the same verdict on the same bytes.
  std::int64_t nonzero = 8;
  for (const std::int64_t n : t->shape) {
    if (n == 0) continue;
    if (nonzero > std::numeric_limits<std::int64_t>::max() / n) {
      throw bad(q + ".shape", shape_string(t->shape) + " of " + t->dtype +
                                  " has non-zero extents of more float64 bytes than fit in 63 bits");
    }
    nonzero *= n;
  }
  // data_offsets
  if (!e.contains("data_offsets")) throw bad(q + ".data_offsets", "missing");
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    throw bad(q + ".data_offsets", "not [begin, end] (an array of two integers; it is " + brief(off) + ")");
  }
  std::uint64_t be[2];
  for (std::size_t i = 0; i < 2; ++i) {
    if (!off[i].is_number_unsigned() && !(off[i].is_number_integer() && off[i].get<std::int64_t>() >= 0)) {
      throw bad(q + ".data_offsets[" + std::to_string(i) + "]", off[i].dump() + " is not a non-negative integer");
    }
    be[i] = off[i].get<std::uint64_t>();
  }
  if (be[0] > be[1]) {
    throw bad(q + ".data_offsets", "begin " + std::to_string(be[0]) + " > end " + std::to_string(be[1]));
  }
  if (be[1] > buffer_size) {
    throw bad(q + ".data_offsets", "end " + std::to_string(be[1]) + " is past the end of the byte buffer (" +
                                       std::to_string(buffer_size) + " bytes)");
  }
  const std::uint64_t need = static_cast<std::uint64_t>(count) * size;
  if (be[1] - be[0] != need) {
    throw bad(q + ".data_offsets", std::to_string(be[1] - be[0]) + " bytes, but shape " + shape_string(t->shape) +
                                       " of " + t->dtype + " needs " + std::to_string(need));
  }
  return {name, be[0], be[1]};
}

void decode_values(const std::string& path, const std::string& name, const std::uint8_t* p, Tensor* t) {
  const std::int64_t n = element_count(t->shape);
  t->values.resize(static_cast<std::size_t>(n));
  const std::string& d = t->dtype;
  for (std::int64_t k = 0; k < n; ++k) {
    double v;
    if (d == "F64") {
      v = std::bit_cast<double>(load_le<std::uint64_t>(p + 8 * k));
    } else if (d == "F32") {
      v = decode_float32(load_le<std::uint32_t>(p + 4 * k));
    } else if (d == "F16") {
      v = decode_float16(load_le<std::uint16_t>(p + 2 * k));
    } else if (d == "BF16") {
      v = decode_bfloat16(load_le<std::uint16_t>(p + 2 * k));
    } else {  // I64
      const auto i = static_cast<std::int64_t>(load_le<std::uint64_t>(p + 8 * k));
      if (i > kMaxExactInt || i < -kMaxExactInt) {
        throw BadInput(path, quote(name) + index_string(t->shape, k),
                       std::to_string(i) + " is outside [-2^53, 2^53], where doubles are exact");
      }
      v = static_cast<double>(i);
    }
    t->values[static_cast<std::size_t>(k)] = v;
  }
}

void encode_values(const std::string& name, const Tensor& t, std::vector<std::uint8_t>& out) {
  const std::string& d = t.dtype;
  for (std::size_t k = 0; k < t.values.size(); ++k) {
    const double v = t.values[k];
    if (d == "F64") {
      store_le(out, std::bit_cast<std::uint64_t>(v));
    } else if (d == "F32") {
      store_le(out, encode_float32(v));
    } else if (d == "F16") {
      store_le(out, encode_float16(v));
    } else if (d == "BF16") {
      store_le(out, encode_bfloat16(v));
    } else {  // I64
      if (!(std::fabs(v) <= static_cast<double>(kMaxExactInt)) || v != std::trunc(v)) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        throw invalid(quote(name) + index_string(t.shape, static_cast<std::int64_t>(k)),
                      std::string(buf) + " is not an integer in [-2^53, 2^53] (dtype I64)");
      }
      store_le(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
    }
  }
}

}  // namespace

BadInput::BadInput(std::string path, std::string field, std::string problem)
    : std::runtime_error(one_line(path + ": " + field + ": " + problem)),
      path_(std::move(path)),
      field_(std::move(field)),
      problem_(std::move(problem)) {}

std::size_t dtype_size(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t n : shape) {
    if (n < 0) throw std::invalid_argument("safetensors: shape: " + shape_string(shape) + " has a negative extent");
    if (n != 0 && count > std::numeric_limits<std::int64_t>::max() / n) {
      throw std::invalid_argument("safetensors: shape: " + shape_string(shape) + " has too many elements");
    }
    count *= n;
  }
  return count;
}

namespace {

/// The header length field, checked against the file size before anything
/// else is read.
std::uint64_t header_length(const std::uint8_t* first8, std::uint64_t file_size, const std::string& path) {
  auto bad = [&](const std::string& field, const std::string& problem) { return BadInput(path, field, problem); };
  if (file_size < 8) {
    throw bad("header length", "the file has " + std::to_string(file_size) +
                                   " bytes, fewer than the 8 of the header length (truncated)");
  }
  const std::uint64_t n = load_le<std::uint64_t>(first8);
  const std::uint64_t rest = file_size - 8;
  if (n > rest) {
    throw bad("header length", std::to_string(n) + " bytes, but only " + std::to_string(rest) +
                                   " bytes follow the length field");
  }
  if (n > kMaxHeader) throw bad("header length", std::to_string(n) + " bytes exceeds the limit of 100000000");
  if (n == 0) throw bad("header", "empty (it must be a JSON object)");
  return n;
}

/// Parses and checks the header (n bytes at hdr) of a file whose byte buffer
/// has buffer_size bytes; fills file (tensors without values) and entries.
void parse_header(const std::uint8_t* hdr, std::uint64_t n, std::uint64_t buffer_size, const std::string& path,
                  File& file, std::vector<Entry>& entries) {
  auto bad = [&](const std::string& field, const std::string& problem) { return BadInput(path, field, problem); };
  if (hdr[0] != '{') {
    char buf[8];
    std::snprintf(buf, sizeof buf, "0x%02x", hdr[0]);
    throw bad("header", std::string("does not start with '{' (first byte ") + buf + ")");
  }
  const json header = parse_json(std::string_view(reinterpret_cast<const char*>(hdr), n), path, "header");
  if (!header.is_object()) throw bad("header", "not a JSON object (it is " + type_of(header) + ")");

  file.source = path;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) throw bad("__metadata__", "not a JSON object (it is " + type_of(e) + ")");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) throw bad("__metadata__." + quote(k), "not a string (it is " + type_of(v) + ")");
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    Tensor t;
    entries.push_back(parse_entry(path, name, e, buffer_size, &t));
    file.tensors.emplace(name, std::move(t));
  }
  // Layout: sorted by offsets, the tensors must tile the byte buffer exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;
  const Entry* prev = nullptr;
  auto range = [](std::uint64_t b, std::uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + "]"; };
  for (const Entry& e : entries) {
    const std::string f = quote(e.name) + ".data_offsets";
    if (e.begin < covered) {
      throw bad(f, range(e.begin, e.end) + " overlaps " + quote(prev->name) + " " + range(prev->begin, prev->end));
    }
    if (e.begin > covered) {
      throw bad(f, range(e.begin, e.end) + " leaves bytes [" + std::to_string(covered) + ", " +
                       std::to_string(e.begin) + ") of the byte buffer unused (tensors must cover it without holes)");
    }
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer_size) {
    throw bad("byte buffer", "bytes [" + std::to_string(covered) + ", " + std::to_string(buffer_size) +
                                 ") are not used by any tensor (tensors must cover it without holes)");
  }
}

}  // namespace

File parse(const std::vector<std::uint8_t>& bytes, const std::string& path) {
  const std::uint64_t n = header_length(bytes.data(), bytes.size(), path);
  File file;
  std::vector<Entry> entries;
  parse_header(bytes.data() + 8, n, bytes.size() - 8 - n, path, file, entries);
  const std::uint8_t* buffer = bytes.data() + 8 + n;
  for (const Entry& e : entries) decode_values(path, e.name, buffer + e.begin, &file.tensors.at(e.name));
  return file;
}

File read(const std::string& path) {
  // Only what is needed, checked before it is read: a regular file (not a
  // FIFO or /dev/zero), the length field against the file size, the header,
  // its layout against the byte buffer's size, then the buffer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw BadInput(path, "file", std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw BadInput(path, "file", "not a regular file");
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  auto read_at = [&](std::uint64_t offset, std::uint8_t* out, std::uint64_t count) {
    std::uint64_t got = 0;
    while (got < count) {
      const ssize_t r = ::pread(fd, out + got, count - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw BadInput(path, "file", std::string("cannot read: ") + std::strerror(errno));
      if (r == 0) throw BadInput(path, "file", "shorter than its size (changed while read)");
      got += static_cast<std::uint64_t>(r);
    }
  };
  std::uint8_t first8[8] = {};
  read_at(0, first8, std::min<std::uint64_t>(size, 8));
  const std::uint64_t n = header_length(first8, size, path);
  std::vector<std::uint8_t> hdr(n);
  read_at(8, hdr.data(), n);
  File file;
  std::vector<Entry> entries;
  parse_header(hdr.data(), n, size - 8 - n, path, file, entries);
  std::vector<std::uint8_t> buffer(size - 8 - n);
  read_at(8 + n, buffer.data(), buffer.size());
  for (const Entry& e : entries) decode_values(path, e.name, buffer.data() + e.begin, &file.tensors.at(e.name));
  return file;
}

std::vector<std::uint8_t> serialize(const File& file) {
  json header = json::object();
  std::vector<std::uint8_t> data;
  for (const auto& [name, t] : file.tensors) {
    const std::string q = quote(name);
    if (name == "__metadata__") throw invalid(q, "the name is reserved for the metadata");
    if (dtype_size(t.dtype) == 0) {
      throw invalid(q + ".dtype", "unsupported dtype " + quote(t.dtype) + " (dmref writes BF16, F16, F32, F64, I64)");
    }
    std::int64_t count;
    try {
      count = element_count(t.shape);
    } catch (const std::invalid_argument&) {
      throw invalid(q + ".shape", shape_string(t.shape) + " has a negative extent or too many elements");
    }
    if (static_cast<std::int64_t>(t.values.size()) != count) {
      throw invalid(q + ".values", std::to_string(t.values.size()) + " values, but shape " + shape_string(t.shape) +
                                       " has " + std::to_string(count));
    }
    const std::uint64_t begin = data.size();
    encode_values(name, t, data);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, std::uint64_t{data.size()}}}};
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string text;
  try {
    text = header.dump();  // compact; keys sorted (nlohmann::json objects are std::maps)
  } catch (const json::type_error&) {
    throw invalid("header", "a name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> out;
  out.reserve(8 + text.size() + data.size());
  store_le(out, std::uint64_t{text.size()});
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write(const std::string& path, const File& file) {
  const std::vector<std::uint8_t> bytes = serialize(file);
  write_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

const Tensor& get(const File& file, const std::string& name) {
  const auto it = file.tensors.find(name);
  if (it == file.tensors.end()) {
    std::string have;
    int shown = 0;
    for (const auto& [n, t] : file.tensors) {
      (void)t;
      if (shown++ == 8) {
        have += ", ...";
        break;
      }
      have += (have.empty() ? "" : ", ") + quote(n);
    }
    throw BadInput(source_of(file), quote(name),
                   "missing (the file has " + std::to_string(file.tensors.size()) + " tensors" +
                       (have.empty() ? "" : ": " + have) + ")");
  }
  return it->second;
}

const Tensor& get(const File& file, const std::string& name, const std::vector<std::int64_t>& shape) {
  const Tensor& t = get(file, name);
  if (t.shape != shape) {
    throw BadInput(source_of(file), quote(name) + ".shape",
                   shape_string(t.shape) + ", expected " + shape_string(shape));
  }
  return t;
}

void require_finite(const File& file, const std::string& name) {
  const Tensor& t = get(file, name);
  for (std::size_t k = 0; k < t.values.size(); ++k) {
    const double v = t.values[k];
    if (std::isfinite(v)) continue;
    const std::string what = std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
    // The multi-index when values and shape agree (always, for a File read
    // from disk), else the flat index.
    bool agree = false;
    try {
      agree = element_count(t.shape) == static_cast<std::int64_t>(t.values.size());
    } catch (const std::invalid_argument&) {
    }
    const std::string idx = agree ? index_string(t.shape, static_cast<std::int64_t>(k)) : "[" + std::to_string(k) + "]";
    throw BadInput(source_of(file), quote(name) + idx, what + " (finite data required)");
  }
}

std::vector<std::int64_t> unflatten(std::int64_t k, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? k % shape[d] : 0;
    k = shape[d] ? k / shape[d] : 0;
  }
  return idx;
}

}  // namespace dmref::io
