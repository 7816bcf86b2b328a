// dmref/conformance/sha256.hpp: SHA-256 (FIPS 180-4) of a byte string, as
// lowercase hex: the manifest's content hash of every fixture file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dmref::conf {

std::string sha256_hex(const std::vector<std::uint8_t>& bytes);
std::string sha256_hex(const std::string& bytes);

}  // namespace dmref::conf
