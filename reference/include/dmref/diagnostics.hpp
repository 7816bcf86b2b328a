// dmref/diagnostics.hpp: how the reference reports a bad parameter. A scheme
// class that refuses a value throws ParameterError naming the scheme and the
// field ("a[1,3]", "eps"), so the conformance layer can name the file and the
// problem's own field (conf::evaluate: `<config file>: config.eps: ...`,
// `<inputs file>: param.a[1,3]: ...`); numbers are printed by show(), the
// shortest decimal that reads back (never %f).
#pragma once

#include <charconv>
#include <stdexcept>
#include <string>
#include <utility>

namespace dmref {

/// A double as the shortest decimal that reads back to it (5e-324, 0.1, 1e+40).
inline std::string show(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

/// A parameter a scheme refuses: what() is "<scheme>: <field>: <problem>".
/// `field` is the scheme's name for it, with an index in brackets for one
/// entry of a tensor ("a[1,3]").
struct ParameterError : std::invalid_argument {
  std::string scheme, field, problem;
  ParameterError(std::string s, std::string f, std::string p)
      : std::invalid_argument(s + ": " + f + ": " + p), scheme(std::move(s)), field(std::move(f)), problem(std::move(p)) {}
};

}  // namespace dmref
