// tools/run_mpi.hpp: `mpirun -n N dmref run ...` (built with DMREF_MPI):
// tokens sharded over the ranks, the file written by rank 0, byte-identical
// to one process (docs/performance.md, "More than one machine").
#pragma once

#include "dmref/conformance/problem.hpp"

#include <string>

namespace dmref::mpi {

/// True when this process was started by an MPI launcher (mpirun / srun set
/// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK); dmref then joins the job.
bool launched();

/// Initializes MPI (once); returns this rank and the number of ranks.
struct World {
  int rank = 0, size = 1;
};
World init();
void finalize();

/// Certifies the tokens t with t % size == rank on `threads` threads, gathers
/// every token's result at rank 0, which writes `out`. Returns the exit status
/// (0; 2 bad input; 3 a token did not certify), the same on every rank; only
/// rank 0 prints.
int run(const conf::Problem& p, const std::string& command, const std::string& case_id, const std::string& out,
        unsigned threads);

}  // namespace dmref::mpi
