// The library version string, recorded in every generated fixture.
namespace dmref {
const char* version() { return "0.1.0"; }
}  // namespace dmref
