// libFuzzer target: the safetensors reader (reference/src/safetensors.cpp).
// Any byte string must either be refused with BadInput or be read; what is
// read must survive serialize -> parse unchanged (dtypes, shapes, values bit
// for bit, metadata). Anything else (a crash, a sanitizer report, another
// exception, a round-trip difference) is a finding.
#include "dmref/io/safetensors.hpp"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  dmref::io::File f;
  try {
    f = dmref::io::parse(bytes, "fuzz.safetensors");
  } catch (const dmref::io::BadInput&) {
    return 0;  // refused, as it should be
  }
  const std::vector<std::uint8_t> again = dmref::io::serialize(f);  // must not throw for a file just read
  const dmref::io::File g = dmref::io::parse(again, "roundtrip.safetensors");
  if (g.metadata != f.metadata || g.tensors.size() != f.tensors.size()) finding("round trip changed the file");
  for (const auto& [name, t] : f.tensors) {
    const auto it = g.tensors.find(name);
    if (it == g.tensors.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        !same_bits(it->second.values, t.values))
      finding("round trip changed a tensor");
  }
  if (dmref::io::serialize(g) != again) finding("serialize is not deterministic");
  return 0;
}
