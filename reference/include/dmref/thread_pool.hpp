// dmref/thread_pool.hpp: the one thread pool of dmref (corpus generation,
// certification, the stability sweeps).
#pragma once

#include <cstddef>
#include <functional>

namespace dmref {

/// Runs task(i) for i = 0..n-1 on min(threads, n) threads (threads 0 counts
/// as 1; 1 runs on the calling thread), tasks handed out in index order.
///
/// First-error rule: once a task has thrown, no task that has not started yet
/// is started; every started task runs to its end; after all threads have
/// joined, the exception of the failed task with the LOWEST index is
/// rethrown. Tasks are handed out in index order, so every task below a
/// failed one has started by then: the exception rethrown is the one a
/// sequential run (threads = 1) throws, for any thread count.
/// If a thread cannot be started, no further task is handed out, and after
/// the join a std::runtime_error names the thread (unless a task failed:
/// that error wins).
///
/// Each worker thread frees MPFR's per-thread caches (constants such as log 2
/// used by exp) before it ends: only that thread can, and LeakSanitizer
/// reports them otherwise.
void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& task);

}  // namespace dmref
