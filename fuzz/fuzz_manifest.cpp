// libFuzzer target: the manifest reader (dmref/conformance/manifest.hpp).
// Any text is refused with BadInput or read into cases whose fields obey the
// documented rules; any other exception, crash or sanitizer report is a finding.
#include "dmref/conformance/manifest.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<dmref::conf::ManifestCase> cases;
  try {
    cases = dmref::conf::parse_manifest(text, "fuzz-manifest.json");
  } catch (const dmref::io::BadInput&) {
    return 0;
  }
  std::set<std::string> ids;
  for (const auto& c : cases) {
    if (c.id.empty() || !ids.insert(c.id).second || c.file.find('/') != std::string::npos || c.sha256.size() != 64 ||
        c.precision_bits < 0) {
      std::fprintf(stderr, "fuzz_manifest: accepted a case that breaks the rules\n");
      std::abort();
    }
  }
  return 0;
}
