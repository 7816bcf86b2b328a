// dmref/thread_pool.hpp: every index runs exactly once, and the first-error
// rule (the lowest-index failure is rethrown, as a sequential run throws it;
// no task starts after a failure) for 1 to 8 threads.
#include "dmref/thread_pool.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using dmref::parallel_for;

TEST_CASE("parallel_for: every index once, any thread count", "[thread_pool]") {
  for (unsigned threads : {0u, 1u, 2u, 3u, 8u})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(100)}) {
      std::vector<std::atomic<int>> hits(n);
      parallel_for(n, threads, [&](std::size_t i) { ++hits[i]; });
      for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
    }
}

TEST_CASE("parallel_for: the lowest-index failure is rethrown, later tasks are not started", "[thread_pool]") {
  // Tasks 5 and 3 fail; task 5 fails at once, task 3 only after a delay, so
  // with several threads task 5's error is the first in time. The rule still
  // rethrows task 3's (the one a sequential run throws), and no task beyond
  // those already handed out starts after the first failure.
  for (unsigned threads : {1u, 2u, 4u, 8u}) {
    std::atomic<std::size_t> started{0};
    std::string what;
    try {
      parallel_for(1000, threads, [&](std::size_t i) {
        ++started;
        if (i == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("task 3");
        }
        if (i == 5) throw std::runtime_error("task 5");
      });
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    INFO("threads " << threads);
    CHECK(what == "task 3");
    // Sequentially tasks 0..3 start; with t threads at most t - 1 tasks are
    // in flight beside the failing one when it fails, plus one each that a
    // worker may take between the failure and its check of the flag: far
    // below the 1000 that would start if failures did not stop the handing out.
    CHECK(started <= (threads == 1 ? 4u : 6u + 2 * threads));
  }
}
