// Whole-file reads and atomic writes (dmref/io/files.hpp).
#include "dmref/io/files.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <cstring>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dmref::io {

namespace {

/// Temporary files being written, for the signal handler: fixed slots of
/// fixed-size names, claimed with an atomic flag (async-signal-safe to read).
constexpr int kSlots = 64;
struct Slot {
  std::atomic<int> used{0};
  char path[4096];
};
Slot slots[kSlots];

int claim(const std::string& path) {
  if (path.size() >= sizeof slots[0].path) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (slots[i].used.compare_exchange_strong(expected, 2)) {  // 2: being filled
      std::memcpy(slots[i].path, path.c_str(), path.size() + 1);
      slots[i].used.store(1);
      return i;
    }
  }
  return -1;  // more than 64 writes at once: still written, just not cleaned on a signal
}

void release(int i) {
  if (i >= 0) slots[i].used.store(0);
}

extern "C" void on_signal(int sig) {
  for (auto& s : slots)
    if (s.used.load() == 1) ::unlink(s.path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string why(int err) { return std::strerror(err); }

}  // namespace

void install_cleanup_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void check_output_path(const std::string& path, const std::string& field) {
  if (path.empty()) throw BadInput(field, "path", "empty");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;  // not there yet (a missing directory fails at the write: exit 4)
  if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return;
  throw BadInput(path, field,
                 std::string("exists and is not a regular file (it is a ") +
                     (S_ISDIR(st.st_mode)   ? "directory"
                      : S_ISFIFO(st.st_mode) ? "FIFO"
                      : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                                                                    : "socket") +
                     "): dmref writes a new file and renames it over the target, which only a regular file may be");
}

void write_atomic(const std::string& path, std::string_view bytes) {
  check_output_path(path, "output");
  std::string tmp = path + ".tmp.XXXXXX";
  // SIGINT/SIGTERM blocked from creating the temporary file until its name is
  // in a slot: a signal in between would leave it behind (cli_test's
  // mid-write test caught that window). A pending signal lands at the unblock.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  const int fd = ::mkstemp(tmp.data());
  const int err = errno;
  const int slot = fd < 0 ? -1 : claim(tmp);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (fd < 0) throw IoError(path + ": write: cannot create a temporary file next to it: " + why(err));
  auto fail = [&](const std::string& what, int err, bool opened) {
    if (opened) ::close(fd);
    ::unlink(tmp.c_str());
    release(slot);
    return IoError(path + ": write: " + what + ": " + why(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) throw fail("cannot write " + tmp, errno, true);
    done += static_cast<std::size_t>(put);
  }
  if (::fchmod(fd, 0644) != 0) throw fail("cannot set the mode of " + tmp, errno, true);
  if (::fsync(fd) != 0) throw fail("cannot flush " + tmp, errno, true);
  if (::close(fd) != 0) throw fail("cannot close " + tmp, errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("cannot rename " + tmp + " to it", errno, false);
  release(slot);
}

std::vector<std::uint8_t> read_bounded(const std::string& path, const std::string& field, std::uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw BadInput(path, field, "cannot open: " + why(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw BadInput(path, field, "not a regular file");
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw BadInput(path, field, std::to_string(st.st_size) + " bytes, more than the limit of " +
                                    std::to_string(max_bytes));
  }
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw BadInput(path, field, "cannot read: " + why(err));
    }
    if (n == 0) break;  // shrank while reading: what is there is judged
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  return bytes;
}

void check_json_depth(std::string_view s, const std::string& path, const std::string& field) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        throw BadInput(path, field, "JSON nesting deeper than " + std::to_string(kMaxJsonDepth));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& path, const std::string& field) {
  using json = nlohmann::json;
  if (const auto z = text.find('\0'); z != std::string_view::npos)
    throw BadInput(path, field, "not valid JSON: a NUL byte at offset " + std::to_string(z));
  // nlohmann::json skips a leading UTF-8 byte order mark, Python's json
  // refuses it: refused here too, so both readers agree on the same bytes.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") throw BadInput(path, field, "not valid JSON: a byte order mark at the start");
  check_json_depth(text, path, field);
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  json j;
  try {
    j = json::parse(text.begin(), text.end(), [&](int, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::object_start) {
        keys.emplace_back();
      } else if (ev == json::parse_event_t::object_end) {
        keys.pop_back();
      } else if (ev == json::parse_event_t::key && !keys.empty()) {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second && duplicate.empty()) duplicate = k;
      }
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, or out_of_range: a number past double
    std::string what = e.what();
    if (const auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    throw BadInput(path, field, "not valid JSON: " + what);
  }
  if (!duplicate.empty())
    throw BadInput(path, field, "duplicate key " + json(duplicate).dump(-1, ' ', false, json::error_handler_t::replace));
  return j;
}

}  // namespace dmref::io
