// tools/run_mpi.cpp: token sharding over MPI ranks for `dmref run` (see run_mpi.hpp).
// Rank r certifies tokens r, r + N, r + 2N, ... (cyclic, so ranks get equal
// shares of a capture whose cost grows along it); each token's result is its
// precision and its flat column of (hi, lo) doubles, the same length for every
// token, so rank 0 gathers them with one MPI_Gatherv and assembles the file in
// token order with the same code as one process (conf::run_file): the bytes
// do not depend on the number of ranks nor on --jobs.
#include "run_mpi.hpp"

#include "dmref/conformance/generate.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

namespace dmref::mpi {

bool launched() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

World init() {
  int flag = 0;
  MPI_Initialized(&flag);
  if (!flag) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // only the main thread calls MPI
  }
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

void finalize() {
  int flag = 0;
  MPI_Initialized(&flag);
  if (flag) MPI_Finalize();
}

int run(const conf::Problem& p, const std::string& command, const std::string& case_id, const std::string& out,
        unsigned threads) {
  const World w = init();
  const std::int64_t T = p.integer("tokens");
  std::vector<std::int64_t> mine;
  for (std::int64_t t = w.rank; t < T; t += w.size) mine.push_back(t);
  // 0 ok, 2 bad input, 3 not certified: every rank does the same validation,
  // so a bad input fails on all of them; a certification failure on any.
  int status = 0;
  std::string error;
  std::vector<conf::TokenGolden> got;
  try {
    got = conf::certify_tokens(p, mine, threads);
  } catch (const io::BadInput& e) {
    status = 2;
    error = std::string("dmref: ") + e.what();
  } catch (const std::invalid_argument& e) {
    status = 2;
    error = std::string("dmref: ") + e.what();
  } catch (const std::exception& e) {
    status = 3;
    error = std::string("dmref: error: ") + e.what();
  }
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst != 0) {
    // The message of the lowest rank that failed, printed by that rank.
    int first = status ? w.rank : w.size, lowest = 0;
    MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (w.rank == lowest) std::fprintf(stderr, "%s\n", error.c_str());
    return worst;
  }
  // n: elements of one token (the same for all); per token: bits (the Ball rung), n hi, n lo.
  const long n = got.empty() ? 0 : long(got[0].c.hi.rows());
  long n_all = 0;
  MPI_Allreduce(&n, &n_all, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  const long per = 1 + 2 * n_all;
  std::vector<double> send;
  send.reserve(std::size_t(per) * mine.size());
  for (const auto& tg : got) {
    const Certified& c = tg.c;
    send.push_back(c.bits);
    send.insert(send.end(), c.hi.data(), c.hi.data() + n_all);
    send.insert(send.end(), c.lo.data(), c.lo.data() + n_all);
  }
  std::vector<int> counts(std::size_t(w.size)), displs(std::size_t(w.size));
  for (int r = 0, off = 0; r < w.size; ++r) {
    const std::int64_t k = r < T ? (T - r + w.size - 1) / w.size : 0;
    if (per * k > std::numeric_limits<int>::max() || off > std::numeric_limits<int>::max() - per * k)
      throw std::runtime_error("dmref run (MPI): more than 2^31 values to gather; use more ranks or fewer tokens per run");
    counts[std::size_t(r)] = int(per * k);
    displs[std::size_t(r)] = off;
    off += counts[std::size_t(r)];
  }
  std::vector<double> all(w.rank == 0 ? std::size_t(per) * std::size_t(T) : 0);
  MPI_Gatherv(send.data(), int(send.size()), MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0,
              MPI_COMM_WORLD);
  if (w.rank != 0) return 0;
  std::vector<conf::TokenGolden> tokens(static_cast<std::size_t>(T));
  tokens[0].layout = got.at(0).layout;  // rank 0 certified token 0
  for (std::int64_t t = 0; t < T; ++t) {
    const int r = int(t % w.size);
    const double* x = all.data() + displs[std::size_t(r)] + per * (t / w.size);
    Certified& c = tokens[std::size_t(t)].c;
    c.bits = int(x[0]);
    c.hi = Eigen::Map<const Mat<double>>(x + 1, n_all, 1);
    c.lo = Eigen::Map<const Mat<double>>(x + 1 + n_all, n_all, 1);
  }
  const io::File f = conf::run_file(p, tokens, command, case_id);
  io::write(out, f);
  std::printf("wrote %s (%zu tensors, certified at %s bits, %lld tokens on %d MPI ranks)\n", out.c_str(),
              f.tensors.size(), f.metadata.at("precision_bits").c_str(), (long long)T, w.size);
  for (const auto& line : conf::left_out_notes(f, out)) std::fprintf(stderr, "%s\n", line.c_str());
  return 0;
}

}  // namespace dmref::mpi
