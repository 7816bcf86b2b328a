// tests/support/nist.hpp: a reader for NIST StRD linear-regression files
// (fixtures/external/nist-strd/*.dat). The header names the line ranges of
// the certified block and the data block, the number of predictors and of
// parameters, and (through "B0") whether the model has an intercept.
// Design matrix: one predictor with P parameters is the polynomial
// x^0..x^{P-1} (x^1..x^P without intercept); p > 1 predictors are linear
// terms with an intercept. Numbers are kept as decimal strings so that each
// scalar type parses them at its own precision (no detour through double).
#pragma once

#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dmref/scalar.hpp"

namespace dmref::test {

struct NistDataset {
  std::string name;
  int predictors = 0, parameters = 0;
  bool intercept = true;
  std::vector<std::string> certified;           // B0.. (or B1..) estimates
  std::vector<std::vector<std::string>> rows;   // y x1 .. xp

  template <class S>
  S parse(const std::string& s) const {
    if constexpr (std::is_same_v<S, double>) return std::stod(s);
    else return S(s);
  }
  /// Design matrix (n x P) and response (n).
  template <class S>
  void design(Mat<S>& X, Vec<S>& y) const {
    const int n = static_cast<int>(rows.size());
    X.resize(n, parameters);
    y.resize(n);
    for (int i = 0; i < n; ++i) {
      y(i) = parse<S>(rows[i][0]);
      if (predictors == 1) {
        const S x = parse<S>(rows[i][1]);
        S p = intercept ? S(1) : x;
        for (int j = 0; j < parameters; ++j, p *= x) X(i, j) = p;
      } else {
        X(i, 0) = S(1);
        for (int j = 1; j < parameters; ++j) X(i, j) = parse<S>(rows[i][j]);
      }
    }
  }
};

inline NistDataset read_nist(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  auto grab = [&](const std::regex& re, const char* what) {
    std::smatch m;
    if (!std::regex_search(text, m, re)) throw std::runtime_error(path + ": header: no " + what);
    return m;
  };
  NistDataset d;
  d.name = path.substr(path.find_last_of('/') + 1);
  const auto cert = grab(std::regex(R"(Certified Values\s*\(lines (\d+) to (\d+)\))"), "certified line range");
  const auto data = grab(std::regex(R"(Data\s*\(lines (\d+) to (\d+)\))"), "data line range");
  d.predictors = std::stoi(grab(std::regex(R"((\d+) Predictor Variable)"), "predictor count")[1]);
  d.parameters = std::stoi(grab(std::regex(R"((\d+) Parameters?)"), "parameter count")[1]);
  d.intercept = std::regex_search(text, std::regex(R"(y = B0)"));
  const std::regex brow(R"(^\s*B(\d+)\s+(\S+))");
  for (int i = std::stoi(cert[1]) - 1; i < std::stoi(cert[2]); ++i) {
    std::smatch m;
    if (std::regex_search(lines.at(i), m, brow)) d.certified.push_back(m[2]);
  }
  for (int i = std::stoi(data[1]) - 1; i < std::stoi(data[2]); ++i) {
    std::istringstream ls(lines.at(i));
    std::vector<std::string> row;
    for (std::string t; ls >> t;) row.push_back(t);
    if (static_cast<int>(row.size()) != d.predictors + 1)
      throw std::runtime_error(path + ": line " + std::to_string(i + 1) + ": expected " +
                               std::to_string(d.predictors + 1) + " numbers");
    d.rows.push_back(row);
  }
  if (static_cast<int>(d.certified.size()) != d.parameters)
    throw std::runtime_error(path + ": certified block: " + std::to_string(d.certified.size()) + " estimates for " +
                             std::to_string(d.parameters) + " parameters");
  if (d.predictors > 1 && d.parameters != d.predictors + 1)
    throw std::runtime_error(path + ": model: expected intercept + linear terms");
  return d;
}

}  // namespace dmref::test
