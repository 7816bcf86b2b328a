// The thread pool of dmref/thread_pool.hpp.
#include "dmref/thread_pool.hpp"

#include <mpfr.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace dmref {

void parallel_for(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& task) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (std::size_t i; !failed && (i = next++) < n;) {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  const unsigned k = unsigned(std::min<std::size_t>(std::max(1u, threads), std::max<std::size_t>(n, 1)));
  std::string spawn_error;
  if (k == 1) {
    worker();
    mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < k; ++t) {
      try {
        pool.emplace_back([&] {
          worker();
          mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
        });
      } catch (const std::system_error& e) {  // no more threads: stop handing out tasks, join, report
        spawn_error = "cannot start thread " + std::to_string(t + 1) + " of " + std::to_string(k) + ": " + e.what();
        failed = true;
        break;
      }
    }
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (!spawn_error.empty()) throw std::runtime_error(spawn_error);
}

}  // namespace dmref
