// libFuzzer target: a fixture file through the gate. The input is a fixture
// (safetensors); it is read, then judged against itself as the candidate by
// conf::verify_case for each dtype: its metadata (case, baselines, tolerance
// JSON) and the hi/lo output tensors are all attacker-controlled. A bad
// fixture must be BadInput (exit 2 from `dmref verify`), never a crash, an
// out-of-bounds read or another exception.
#include "dmref/conformance/verify.hpp"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  try {
    const dmref::io::File fx = dmref::io::parse(bytes, "fuzz.safetensors");
    for (const char* dtype : {"f32", "bf16", "f16"}) {
      dmref::conf::VerifyOptions opt;
      opt.dtype = dtype;
      (void)dmref::conf::verify_case(fx, fx, opt, true, 4);
    }
  } catch (const dmref::io::BadInput&) {
  }
  return 0;
}
