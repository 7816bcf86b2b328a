// dmref/version.hpp: the generator version recorded in fixtures.
#pragma once
namespace dmref {
const char* version();
}  // namespace dmref
