// Unit tests of the safetensors reader and writer (dmref/io/safetensors.hpp).
// Every bad input is built byte by byte here, written to a scratch directory
// and read back; each must raise BadInput with the field and problem named on
// one line. Round trips are exact, so every comparison is == (bit patterns).
#include "dmref/io/safetensors.hpp"

#include "dmref/dtype.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

using namespace dmref;
using dmref::io::BadInput;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

/// A scratch directory, removed with everything in it at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("dmref_test_safetensors_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  /// Names of the files in the directory (to see that no temporary is left).
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

void put_le64(Bytes& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

/// A file made of a header length (by default the header's), the header
/// text, and the byte buffer.
Bytes file_bytes(const std::string& header, const Bytes& buffer, std::optional<std::uint64_t> length = {}) {
  Bytes b;
  put_le64(b, length ? *length : header.size());
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), buffer.begin(), buffer.end());
  return b;
}
Bytes zeros(std::size_t n) { return Bytes(n, 0); }

void write_raw(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

Bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Reads `bytes` from a file; the BadInput it must raise.
BadInput bad_read(const Scratch& s, const Bytes& bytes) {
  const std::string p = s.path("bad.safetensors");
  write_raw(p, bytes);
  try {
    io::read(p);
  } catch (const BadInput& e) {
    return e;
  }
  FAIL("read accepted a bad file: " << std::string(bytes.begin() + std::min<std::size_t>(8, bytes.size()), bytes.end()));
  throw 0;  // unreachable
}

/// The message is one line, "<path>: <field>: <problem>".
void check_message(const BadInput& e, const std::string& field, const std::string& problem_part) {
  INFO("message: " << e.what());
  CHECK(e.field() == field);
  CHECK_THAT(e.problem(), Contains(problem_part));
  CHECK(std::string(e.what()) == e.path() + ": " + e.field() + ": " + e.problem());
  CHECK(std::string(e.what()).find('\n') == std::string::npos);
}

void check_bad(const Scratch& s, const Bytes& bytes, const std::string& field, const std::string& problem_part) {
  const BadInput e = bad_read(s, bytes);
  CHECK(e.path() == s.path("bad.safetensors"));
  check_message(e, field, problem_part);
}

/// One F32 tensor "w" of shape [2] at [0, 8]: the valid file the bad ones vary.
const std::string kW = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

void check_same(const io::File& a, const io::File& b) {
  REQUIRE(a.metadata == b.metadata);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    INFO("tensor " << name);
    const io::Tensor& u = b.tensors.at(name);
    CHECK(t.dtype == u.dtype);
    CHECK(t.shape == u.shape);
    REQUIRE(t.values.size() == u.values.size());
    for (std::size_t k = 0; k < t.values.size(); ++k) CHECK(same_bits(t.values[k], u.values[k]));
  }
}

/// Values exactly representable in every float dtype (so they round-trip
/// unchanged), plus the special values.
std::vector<double> special_values(const FloatFormat& f) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  return {0.0, -0.0, 1.0, -1.5, 0.25, max_finite(f), -max_finite(f), std::ldexp(1.0, f.emin),
          std::ldexp(1.0, f.emin - f.precision + 1),  // smallest subnormal
          inf, -inf, nan, -nan};
}

io::File sample_file() {
  io::File f;
  f.tensors["b.weight"] = {"F32", {2, 3}, {1, 2, 3, -4, 0.5, 1e-3}};
  f.tensors["a"] = {"I64", {}, {7}};
  f.tensors["empty"] = {"F16", {0, 4}, {}};
  f.tensors["z"] = {"BF16", {3}, {1, -2, 0.125}};
  f.metadata["generator"] = "dmref test";
  f.metadata["seed"] = "42";
  return f;
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips exactly", "[safetensors][roundtrip]") {
  Scratch s;
  const FloatFormat f64{53, 11, -1022, 1023, "float64"};
  io::File f;
  f.tensors["f64"] = {"F64", {13}, special_values(f64)};
  f.tensors["f64"].values[1] = std::numeric_limits<double>::denorm_min();
  f.tensors["f64"].values.push_back(std::bit_cast<double>(std::uint64_t{0x7ff0000000000001}));  // a signalling NaN
  f.tensors["f64"].shape = {14};
  f.tensors["f32"] = {"F32", {13}, special_values(float32)};
  f.tensors["f16"] = {"F16", {13}, special_values(float16)};
  f.tensors["bf16"] = {"BF16", {13}, special_values(bfloat16)};
  f.tensors["i64"] = {"I64", {2, 3}, {0, -1, 1, 9007199254740992.0, -9007199254740992.0, 123456789}};
  f.tensors["scalar"] = {"F64", {}, {3.25}};
  f.tensors["empty"] = {"F32", {3, 0, 2}, {}};
  f.metadata["a key"] = "a value with \"quotes\", a newline\n and UTF-8: \xc3\xa9";
  const std::string p = s.path("all.safetensors");
  io::write(p, f);
  const io::File g = io::read(p);
  CHECK(g.source == p);
  check_same(f, g);
  // Every bit pattern of the 16-bit dtypes survives a write and a read.
  io::File all;
  for (const char* dt : {"F16", "BF16"}) {
    const FloatFormat& fmt = std::string(dt) == "F16" ? float16 : bfloat16;
    io::Tensor t{dt, {65536}, {}};
    for (std::uint32_t b = 0; b < 65536; ++b) t.values.push_back(decode(fmt, b));
    all.tensors[dt] = t;
  }
  io::write(p, all);
  check_same(all, io::read(p));
}

TEST_CASE("safetensors: narrow dtypes are rounded to nearest even on write", "[safetensors][roundtrip]") {
  io::File f;
  const std::vector<double> x{0.1, 1.0 / 3, 1e10, 1e-9, 70000.0};
  for (const char* dt : {"F32", "F16", "BF16"}) f.tensors[dt] = {dt, {5}, x};
  const io::File g = io::parse(io::serialize(f), "mem");
  for (std::size_t k = 0; k < x.size(); ++k) {
    CHECK(same_bits(g.tensors.at("F32").values[k], round_to_float32(x[k])));
    CHECK(same_bits(g.tensors.at("F16").values[k], round_to_float16(x[k])));
    CHECK(same_bits(g.tensors.at("BF16").values[k], round_to_bfloat16(x[k])));
  }
  CHECK(std::isinf(g.tensors.at("F16").values[4]));  // 70000 > 65504 + 16
}

TEST_CASE("safetensors: the writer's bytes are exactly the documented layout", "[safetensors][layout]") {
  io::File f;
  f.tensors["b"] = {"F32", {2}, {1, 2}};
  f.tensors["a"] = {"I64", {}, {7}};
  f.metadata["k"] = "v";
  // Keys sorted ("__metadata__" < "a" < "b" bytewise), compact, tensors laid
  // out in name order: a at [0, 8], b at [8, 16].
  const std::string json =
      R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[0,8],"dtype":"I64","shape":[]},)"
      R"("b":{"data_offsets":[8,16],"dtype":"F32","shape":[2]}})";
  std::string header = json;
  header.append((8 - json.size() % 8) % 8, ' ');  // padded with spaces to a multiple of 8
  Bytes buffer = {7, 0, 0, 0, 0, 0, 0, 0,                // I64 7, little-endian
                  0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};  // F32 1.0f = 0x3f800000, 2.0f = 0x40000000
  const Bytes expected = file_bytes(header, buffer);
  CHECK(io::serialize(f) == expected);
  CHECK(header.size() % 8 == 0);
}

TEST_CASE("safetensors: repeated writes are byte-identical, a read-back file re-serializes to the same bytes",
          "[safetensors][determinism]") {
  Scratch s;
  const io::File f = sample_file();
  io::write(s.path("one.safetensors"), f);
  io::write(s.path("two.safetensors"), f);
  const Bytes one = read_raw(s.path("one.safetensors"));
  CHECK(one == read_raw(s.path("two.safetensors")));
  CHECK(one == io::serialize(f));
  CHECK(io::serialize(io::read(s.path("one.safetensors"))) == one);
  io::write(s.path("one.safetensors"), f);  // overwrite in place
  CHECK(read_raw(s.path("one.safetensors")) == one);
  CHECK(s.listing() == std::vector<std::string>{"one.safetensors", "two.safetensors"});  // no temporaries left
  // Where the header ends and the data begins is 8-byte aligned.
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{one[i]} << (8 * i);
  CHECK(n % 8 == 0);
}

TEST_CASE("safetensors: valid files from other writers are accepted", "[safetensors][read]") {
  Scratch s;
  const std::string p = s.path("ok.safetensors");
  SECTION("unsorted keys, metadata last, data in another order, trailing whitespace") {
    const std::string h = R"({"y":{"shape":[1],"dtype":"F64","data_offsets":[8,16]},"x":{"dtype":"F64","shape":[1],)"
                          R"("data_offsets":[0,8]},"__metadata__":{"format":"pt"}}   )";
    Bytes buf;
    put_le64(buf, std::bit_cast<std::uint64_t>(1.5));
    put_le64(buf, std::bit_cast<std::uint64_t>(-2.5));
    write_raw(p, file_bytes(h, buf));
    const io::File f = io::read(p);
    CHECK(f.tensors.at("x").values == std::vector<double>{1.5});
    CHECK(f.tensors.at("y").values == std::vector<double>{-2.5});
    CHECK(f.metadata.at("format") == "pt");
  }
  SECTION("no tensors at all") {
    write_raw(p, file_bytes("{}      ", {}));
    const io::File f = io::read(p);
    CHECK(f.tensors.empty());
    CHECK(f.metadata.empty());
  }
  SECTION("an empty tensor between two others") {
    const std::string h = R"({"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"e":{"dtype":"F64","shape":[0],)"
                          R"("data_offsets":[2,2]},"b":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})";
    write_raw(p, file_bytes(h, {0x00, 0x3c, 0x00, 0xc0}));  // F16 1.0 = 0x3c00, -2.0 = 0xc000
    const io::File f = io::read(p);
    CHECK(f.tensors.at("a").values == std::vector<double>{1.0});
    CHECK(f.tensors.at("b").values == std::vector<double>{-2.0});
    CHECK(f.tensors.at("e").values.empty());
  }
}

TEST_CASE("safetensors: unreadable and truncated files", "[safetensors][bad]") {
  Scratch s;
  SECTION("missing file") {
    try {
      io::read(s.path("nope.safetensors"));
      FAIL("no error");
    } catch (const BadInput& e) {
      CHECK(e.path() == s.path("nope.safetensors"));
      check_message(e, "file", "cannot open: No such file or directory");
    }
  }
  SECTION("a directory, a character device: refused before a byte is read") {
    for (const std::string p : {s.dir.string(), std::string("/dev/zero")}) {
      try {
        io::read(p);
        FAIL("no error");
      } catch (const BadInput& e) {
        check_message(e, "file", "not a regular file");
      }
    }
  }
  SECTION("empty and shorter than 8 bytes") {
    check_bad(s, {}, "header length", "the file has 0 bytes, fewer than the 8");
    check_bad(s, {1, 0, 0, 0, 0}, "header length", "the file has 5 bytes");
  }
  SECTION("header length past the end of the file") {
    check_bad(s, file_bytes("{}", {}, 1000), "header length", "1000 bytes, but only 2 bytes follow");
    check_bad(s, file_bytes("{}", {}, std::numeric_limits<std::uint64_t>::max()), "header length",
              "18446744073709551615 bytes, but only 2");
    const std::string h = "{" + kW + "}";
    check_bad(s, file_bytes(h, zeros(8), h.size() + 9), "header length", "but only " + std::to_string(h.size() + 8));
  }
  SECTION("zero header length") { check_bad(s, file_bytes("", zeros(8), 0), "header", "empty"); }
}

TEST_CASE("safetensors: header that is not a JSON object", "[safetensors][bad]") {
  Scratch s;
  check_bad(s, file_bytes("[1, 2]", {}), "header", "does not start with '{' (first byte 0x5b)");
  check_bad(s, file_bytes(" {}", {}), "header", "does not start with '{'");
  check_bad(s, file_bytes(R"({"w": )", {}), "header", "not valid JSON");
  check_bad(s, file_bytes(R"({"w": {}} trailing)", {}), "header", "not valid JSON");
  // nlohmann::json alone would stop at a NUL and ignore the rest.
  check_bad(s, file_bytes(std::string("{}\0\0", 4), {}), "header", "not valid JSON: a NUL byte at offset 2");
  check_bad(s, file_bytes(std::string("{}\0x", 4), {}), "header", "a NUL byte at offset 2");
  check_bad(s, file_bytes("{" + kW + "," + kW + "}", zeros(8)), "header", "duplicate key \"w\"");
  check_bad(s, file_bytes(R"({"__metadata__":{"a":"1","a":"2"}})", {}), "header", "duplicate key \"a\"");
  const BadInput e = bad_read(s, file_bytes("{\"w\x01\": 3}", {}));  // a raw control character
  CHECK(std::string(e.what()).find('\x01') == std::string::npos);  // messages stay printable
}

TEST_CASE("safetensors: tensor entries with missing or malformed fields", "[safetensors][bad]") {
  Scratch s;
  auto entry = [](const std::string& body) { return file_bytes(R"({"w":)" + body + "}", zeros(8)); };
  SECTION("entry not an object, missing fields, unexpected keys") {
    check_bad(s, entry("3"), "\"w\"", "not a JSON object (it is number)");
    check_bad(s, entry(R"({"shape":[2],"data_offsets":[0,8]})"), "\"w\".dtype", "missing");
    check_bad(s, entry(R"({"dtype":"F32","data_offsets":[0,8]})"), "\"w\".shape", "missing");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2]})"), "\"w\".data_offsets", "missing");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"offsets":[0,8]})"), "\"w\"",
              "unexpected key \"offsets\"");
  }
  SECTION("dtype") {
    check_bad(s, entry(R"({"dtype":"I32","shape":[2],"data_offsets":[0,8]})"), "\"w\".dtype",
              "unsupported dtype \"I32\"");
    check_bad(s, entry(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"), "\"w\".dtype",
              "unsupported dtype \"f32\"");
    check_bad(s, entry(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), "\"w\".dtype", "not a string");
  }
  SECTION("shape") {
    check_bad(s, entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), "\"w\".shape[0]", "-2 is negative");
    check_bad(s, entry(R"({"dtype":"F32","shape":[1,2.5],"data_offsets":[0,8]})"), "\"w\".shape[1]",
              "2.5 is not an integer");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), "\"w\".shape[0]",
              "2.0 is not an integer");
    check_bad(s, entry(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})"), "\"w\".shape[0]",
              "not an integer (it is string)");
    check_bad(s, entry(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), "\"w\".shape", "not an array");
    check_bad(s, entry(R"({"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]})"),
              "\"w\".shape[0]", "is too large");
    check_bad(s, entry(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), "\"w\".shape",
              "more elements than fit in 63 bits");
    check_bad(s, entry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"), "\"w\".shape",
              "more bytes than fit in 63 bits");
  }
  SECTION("data_offsets") {
    check_bad(s, entry(R"({"dtype":"F32","shape":[2],"data_offsets":8})"), "\"w\".data_offsets",
              "not [begin, end]");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"), "\"w\".data_offsets",
              "not [begin, end]");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-1,8]})"), "\"w\".data_offsets[0]",
              "-1 is not a non-negative integer");
    check_bad(s, entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8.0]})"), "\"w\".data_offsets[1]",
              "8.0 is not a non-negative integer");
    check_bad(s, entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), "\"w\".data_offsets",
              "begin 8 > end 0");
    check_bad(s, entry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), "\"w\".data_offsets",
              "end 16 is past the end of the byte buffer (8 bytes)");
    check_bad(s, entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), "\"w\".data_offsets",
              "8 bytes, but shape [3] of F32 needs 12");
    check_bad(s, entry(R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})"), "\"w\".data_offsets",
              "8 bytes, but shape [2] of F64 needs 16");
  }
}

TEST_CASE("safetensors: tensors must tile the byte buffer without overlaps or holes", "[safetensors][bad]") {
  Scratch s;
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  check_bad(s, file_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", zeros(12)),
            "\"b\".data_offsets", "[4, 12] overlaps \"a\" [0, 8]");
  check_bad(s, file_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
            "\"b\".data_offsets", "[0, 8] overlaps \"a\" [0, 8]");
  check_bad(s, file_bytes("{" + a + R"(,"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", zeros(8)),
            "\"e\".data_offsets", "[4, 4] overlaps \"a\" [0, 8]");
  check_bad(s, file_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", zeros(20)),
            "\"b\".data_offsets", "leaves bytes [8, 12) of the byte buffer unused");
  check_bad(s, file_bytes("{" + a + "}", zeros(12)), "byte buffer", "bytes [8, 12) are not used by any tensor");
  check_bad(s, file_bytes("{}", zeros(1)), "byte buffer", "bytes [0, 1) are not used");
}

TEST_CASE("safetensors: __metadata__ must map strings to strings", "[safetensors][bad]") {
  Scratch s;
  check_bad(s, file_bytes(R"({"__metadata__":"x"})", {}), "__metadata__", "not a JSON object (it is string)");
  check_bad(s, file_bytes(R"({"__metadata__":["x"]})", {}), "__metadata__", "not a JSON object (it is array)");
  check_bad(s, file_bytes(R"({"__metadata__":{"seed":42}})", {}), "__metadata__.\"seed\"",
            "not a string (it is number)");
  check_bad(s, file_bytes(R"({"__metadata__":{"k":null}})", {}), "__metadata__.\"k\"", "not a string (it is null)");
}

TEST_CASE("safetensors: I64 values must be exact doubles", "[safetensors][bad]") {
  Scratch s;
  Bytes buf;
  put_le64(buf, 1);
  put_le64(buf, (std::uint64_t{1} << 53) + 1);
  check_bad(s, file_bytes(R"({"i":{"dtype":"I64","shape":[1,2],"data_offsets":[0,16]}})", buf), "\"i\"[0,1]",
            "9007199254740993 is outside [-2^53, 2^53]");
  io::File f;
  f.tensors["i"] = {"I64", {1}, {0.5}};
  CHECK_THROWS_WITH(io::serialize(f), Contains("\"i\"[0]: 0.5 is not an integer"));
  f.tensors["i"].values = {9007199254740994.0};
  CHECK_THROWS_AS(io::serialize(f), std::invalid_argument);
  f.tensors["i"].values = {std::numeric_limits<double>::quiet_NaN()};
  CHECK_THROWS_AS(io::serialize(f), std::invalid_argument);
}

TEST_CASE("safetensors: get() checks presence and shape, require_finite() the values", "[safetensors][bad]") {
  Scratch s;
  const std::string p = s.path("f.safetensors");
  io::File f;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  f.tensors["ok"] = {"F64", {2, 2}, {1, 2, 3, 4}};
  f.tensors["nan"] = {"F64", {2, 3}, {1, 2, 3, nan, 5, 6}};
  f.tensors["inf"] = {"F32", {3}, {1, inf, 2}};
  f.tensors["minf"] = {"BF16", {}, {-inf}};
  io::write(p, f);
  const io::File g = io::read(p);
  CHECK(io::get(g, "ok", {2, 2}).values == std::vector<double>{1, 2, 3, 4});
  CHECK_NOTHROW(io::require_finite(g, "ok"));
  auto expect = [&](auto&& call, const std::string& field, const std::string& problem) {
    try {
      call();
      FAIL("no error for " << field);
    } catch (const BadInput& e) {
      CHECK(e.path() == p);
      check_message(e, field, problem);
    }
  };
  expect([&] { io::get(g, "ok", {4}); }, "\"ok\".shape", "[2,2], expected [4]");
  expect([&] { io::get(g, "ok", {}); }, "\"ok\".shape", "[2,2], expected []");
  expect([&] { io::get(g, "missing", {2}); }, "\"missing\"", "missing (the file has 4 tensors: \"inf\"");
  expect([&] { io::require_finite(g, "nan"); }, "\"nan\"[1,0]", "NaN (finite data required)");
  expect([&] { io::require_finite(g, "inf"); }, "\"inf\"[1]", "+inf (finite data required)");
  expect([&] { io::require_finite(g, "minf"); }, "\"minf\"[]", "-inf (finite data required)");
  expect([&] { io::require_finite(g, "missing"); }, "\"missing\"", "missing");
  // A File built in memory is named <memory>.
  try {
    io::get(f, "x");
    FAIL("no error");
  } catch (const BadInput& e) {
    CHECK(e.path() == "<memory>");
  }
}

TEST_CASE("safetensors: a failed write leaves no partial file and no temporary", "[safetensors][write]") {
  Scratch s;
  const std::string p = s.path("keep.safetensors");
  const io::File good = sample_file();
  io::write(p, good);
  const Bytes before = read_raw(p);
  SECTION("an invalid File is refused before anything is written") {
    io::File bad = good;
    bad.tensors["b.weight"].values.pop_back();
    CHECK_THROWS_WITH(io::write(p, bad), Contains("\"b.weight\".values: 5 values, but shape [2,3] has 6"));
    bad = good;
    bad.tensors["x"] = {"I32", {1}, {1}};
    CHECK_THROWS_WITH(io::write(p, bad), Contains("\"x\".dtype: unsupported dtype \"I32\""));
    bad = good;
    bad.tensors["x"] = {"F32", {-1}, {}};
    CHECK_THROWS_AS(io::write(p, bad), std::invalid_argument);
    bad = good;
    bad.tensors["__metadata__"] = {"F32", {1}, {1}};
    CHECK_THROWS_WITH(io::write(p, bad), Contains("reserved"));
    CHECK(read_raw(p) == before);
  }
  SECTION("the directory does not exist") {
    CHECK_THROWS_WITH(io::write(s.path("no/such/dir.safetensors"), good), Contains(": write: "));
  }
  SECTION("the target is a directory (refused before a temporary file is made: io::check_output_path)") {
    fs::create_directories(s.dir / "occupied" / "inside");
    CHECK_THROWS_WITH(io::write(s.path("occupied"), good), Contains("occupied: output: exists and is not a regular file"));
    CHECK(fs::is_directory(s.dir / "occupied" / "inside"));
  }
  CHECK(read_raw(p) == before);
  for (const auto& name : s.listing()) CHECK(name.find(".tmp.") == std::string::npos);
}
