// A small fuzzing driver linked with one libFuzzer-style harness (LLVMFuzzerTestOneInput).
// Debian 12's clang cannot build this code base (std::expected with libstdc++ 12), so there is no
// libFuzzer: harnesses are built with g++ under ASan+UBSan and driven by this main() instead.
//
// What it does: replays every corpus file, then runs mutations of corpus entries (bit flips,
// byte sets and inserts, deletes, duplications, splices, dictionary tokens, numbers) from a
// deterministic seed, bounded by a run count and by time. A crash (sanitizer report, signal,
// uncaught exception) or an input slower than --input-timeout writes that input to the crash
// directory and fails. docs/testing.md ("Fuzzing") says how to run a harness longer.
//
// Usage: fuzz_<name> [--seconds S] [--runs N] [--seed K] [--max-len L] [--dict FILE]
//                    [--crash-dir DIR] [--time-file FILE] [--input-timeout S] [--limit S]
//                    CORPUS_DIR_OR_FILE...

#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct options {
  double seconds = 10;
  std::uint64_t runs = 1'000'000;
  std::uint64_t seed = 1;
  std::size_t max_len = 64 * 1024;
  double input_timeout = 10;
  double limit = 0;  // fail when the whole run took longer (0: no check)
  std::string dict;
  std::string crash_dir = "fuzz-crashes";
  std::string time_file;
  std::vector<std::string> inputs;
};

// The input being run, for the crash hooks (read from a signal handler: plain buffer).
char g_crash_dir[4096];
std::atomic<const std::uint8_t*> g_cur_data{nullptr};
std::atomic<std::size_t> g_cur_size{0};
std::atomic<std::int64_t> g_cur_start_ns{0};
std::atomic<bool> g_dumped{false};
std::atomic<std::uint64_t> g_iteration{0};
std::atomic<std::uint64_t> g_accepted{0};
std::uint64_t g_seed = 0;
std::atomic<bool> g_mutating{false};  // false while the corpus is replayed

void write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_u64(int fd, std::uint64_t v) {
  char buf[24];
  int i = sizeof buf;
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  write_all(fd, buf + i, sizeof buf - static_cast<std::size_t>(i));
}

// Async-signal-safe: FNV-1a of the input names the file; open/write/close only.
void dump_current(const char* kind) {
  if (g_dumped.exchange(true)) return;
  const std::uint8_t* d = g_cur_data.load();
  std::size_t n = g_cur_size.load();
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; d && i < n; ++i) h = (h ^ d[i]) * 1099511628211ull;
  char path[4200];
  std::size_t len = std::strlen(g_crash_dir);
  std::memcpy(path, g_crash_dir, len);
  path[len++] = '/';
  for (const char* k = kind; *k; ++k) path[len++] = *k;
  path[len++] = '-';
  for (int i = 15; i >= 0; --i) path[len++] = "0123456789abcdef"[(h >> (i * 4)) & 0xf];
  path[len] = '\0';
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    if (d) write_all(fd, d, n);
    ::close(fd);
  }
  const char msg[] = "\n==fuzz== input written to ";
  write_all(2, msg, sizeof msg - 1);
  write_all(2, path, len);
  if (g_mutating.load()) {
    write_all(2, " (seed ", 7);
    write_u64(2, g_seed);
    write_all(2, ", mutation ", 11);
    write_u64(2, g_iteration.load());
    write_all(2, ")", 1);
  } else {
    write_all(2, " (corpus replay)", 16);
  }
  write_all(2, "\n", 1);
}

void on_sanitizer_death() { dump_current("crash"); }

void on_signal(int sig) {
  dump_current("crash");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

// Kills the run when one input takes longer than the timeout (a hang or an exponential path).
void watchdog(double timeout_s, const std::atomic<bool>& stop) {
  const auto limit = static_cast<std::int64_t>(timeout_s * 1e9);
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::int64_t start = g_cur_start_ns.load();
    if (start != 0 && now_ns() - start > limit) {
      std::fprintf(stderr, "==fuzz== one input ran longer than %.1f s (iteration %llu)\n",
                   timeout_s, static_cast<unsigned long long>(g_iteration.load()));
      dump_current("slow");
      std::_Exit(70);
    }
  }
}

void run_one(const std::string& input) {
  // An exact-size heap copy, so ASan sees any read past the end.
  std::unique_ptr<std::uint8_t[]> buf(new std::uint8_t[input.size() ? input.size() : 1]);
  std::memcpy(buf.get(), input.data(), input.size());
  g_cur_data.store(buf.get());
  g_cur_size.store(input.size());
  g_cur_start_ns.store(now_ns());
  LLVMFuzzerTestOneInput(buf.get(), input.size());
  g_cur_start_ns.store(0);
  g_cur_data.store(nullptr);
  g_cur_size.store(0);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// libFuzzer's dictionary format: one token per line, `name="value"` or `"value"`, with \\, \"
// and \xNN escapes; '#' starts a comment line.
std::vector<std::string> load_dict(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto a = line.find('"');
    auto b = line.rfind('"');
    if (line.empty() || line[0] == '#' || a == std::string::npos || b <= a) continue;
    std::string tok;
    for (std::size_t i = a + 1; i < b; ++i) {
      if (line[i] != '\\' || i + 1 >= b) {
        tok += line[i];
      } else if (line[i + 1] == 'x' && i + 3 < b && hex_value(line[i + 2]) >= 0 &&
                 hex_value(line[i + 3]) >= 0) {
        tok += static_cast<char>(hex_value(line[i + 2]) * 16 + hex_value(line[i + 3]));
        i += 3;
      } else {
        tok += line[++i];
      }
    }
    if (!tok.empty()) out.push_back(std::move(tok));
  }
  return out;
}

class mutator {
 public:
  mutator(std::uint64_t seed, const std::vector<std::string>& corpus,
          const std::vector<std::string>& dict, std::size_t max_len)
      : rng_(seed), corpus_(corpus), dict_(dict), max_len_(max_len) {}

  std::string next() {
    std::string s = corpus_.empty() ? std::string() : corpus_[below(corpus_.size())];
    const int edits = 1 + static_cast<int>(below(5));
    for (int e = 0; e < edits; ++e) mutate(s);
    if (s.size() > max_len_) s.resize(max_len_);
    return s;
  }

 private:
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }

  void mutate(std::string& s) {
    static const char kSpecial[] = "\0\xff\x7f\x80\"'<>&;:/\\.-+{}[],=%?#@ \t\r\n0 9aZ";
    static const char* const kNumbers[] = {"0",
                                           "-1",
                                           "1",
                                           "255",
                                           "65536",
                                           "2147483648",
                                           "4294967296",
                                           "-9223372036854775809",
                                           "18446744073709551616",
                                           "1e308",
                                           "0x7fffffff",
                                           "99999999999999999999999999"};
    const std::size_t at = below(s.size() + 1);
    switch (below(11)) {
      case 0:
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
        break;
      case 1:
        if (!s.empty()) s[below(s.size())] = static_cast<char>(rng_());
        break;
      case 2:
        if (!s.empty()) s[below(s.size())] = kSpecial[below(sizeof kSpecial - 1)];
        break;
      case 3:
        for (std::size_t n = 1 + below(8); n > 0; --n)
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(rng_()));
        break;
      case 4:
        if (!s.empty()) s.erase(below(s.size()), 1 + below(16));
        break;
      case 5:
        if (!s.empty()) {
          std::size_t from = below(s.size());
          s.insert(at, s.substr(from, 1 + below(64)));
        }
        break;
      case 6:
        if (!corpus_.empty()) {
          const std::string& o = corpus_[below(corpus_.size())];
          std::size_t from = below(o.size() + 1);
          s = s.substr(0, at) + o.substr(from);
        }
        break;
      case 7:
      case 8:
        if (!dict_.empty()) {
          const std::string& t = dict_[below(dict_.size())];
          if (below(2) == 0 || s.empty()) {
            s.insert(at, t);
          } else {
            std::size_t p = below(s.size());
            s.replace(p, std::min(t.size(), s.size() - p), t);
          }
        }
        break;
      case 9:
        replace_number(s, kNumbers[below(std::size(kNumbers))]);
        break;
      default:
        if (!s.empty()) {  // repeat a short chunk many times (depth, length, counts)
          std::size_t from = below(s.size());
          std::string chunk = s.substr(from, 1 + below(4));
          std::string rep;
          for (std::size_t n = 2 + below(2000); n > 0 && rep.size() < max_len_; --n) rep += chunk;
          s.insert(at, rep);
        }
        break;
    }
  }

  void replace_number(std::string& s, const char* num) {
    std::vector<std::size_t> starts;
    for (std::size_t i = 0; i < s.size(); ++i) {
      bool digit = s[i] >= '0' && s[i] <= '9';
      bool prev = i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9';
      if (digit && !prev) starts.push_back(i);
    }
    if (starts.empty()) {
      s.insert(below(s.size() + 1), num);
      return;
    }
    std::size_t a = starts[below(starts.size())], b = a;
    while (b < s.size() && s[b] >= '0' && s[b] <= '9') ++b;
    s.replace(a, b - a, num);
  }

  std::mt19937_64 rng_;
  const std::vector<std::string>& corpus_;
  const std::vector<std::string>& dict_;
  std::size_t max_len_;
};

bool parse_args(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a.rfind("--", 0) == 0 && !(v = value())) {
      std::fprintf(stderr, "fuzz: %s needs a value\n", a.c_str());
      return false;
    }
    if (a == "--seconds") {
      o.seconds = std::atof(v);
    } else if (a == "--runs") {
      o.runs = std::strtoull(v, nullptr, 10);
    } else if (a == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--max-len") {
      o.max_len = std::strtoull(v, nullptr, 10);
    } else if (a == "--dict") {
      o.dict = v;
    } else if (a == "--crash-dir") {
      o.crash_dir = v;
    } else if (a == "--time-file") {
      o.time_file = v;
    } else if (a == "--input-timeout") {
      o.input_timeout = std::atof(v);
    } else if (a == "--limit") {
      o.limit = std::atof(v);
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "fuzz: unknown option %s\n", a.c_str());
      return false;
    } else {
      o.inputs.push_back(a);
    }
  }
  return true;
}

std::vector<std::string> load_corpus(const std::vector<std::string>& inputs) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(in, ec))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(in, ec)) {
      files.emplace_back(in);
    } else {
      std::fprintf(stderr, "fuzz: no corpus at %s\n", in.c_str());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(read_file(f));
  return out;
}

}  // namespace

extern "C" void shoal_fuzz_accepted() { g_accepted.fetch_add(1); }

int main(int argc, char** argv) {
  options o;
  if (!parse_args(argc, argv, o)) return 2;
  std::error_code ec;
  fs::create_directories(o.crash_dir, ec);
  std::snprintf(g_crash_dir, sizeof g_crash_dir, "%s", o.crash_dir.c_str());
  __sanitizer_set_death_callback(on_sanitizer_death);
  // Aborts (uncaught exceptions, failed checks) come here; ASan reports SEGV and friends itself
  // and calls the death callback.
  std::signal(SIGABRT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);

  const auto start = clock_type::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock_type::now() - start).count(); };
  std::atomic<bool> stop{false};
  std::thread dog(watchdog, o.input_timeout, std::cref(stop));

  const std::vector<std::string> corpus = load_corpus(o.inputs);
  const std::vector<std::string> dict =
      o.dict.empty() ? std::vector<std::string>{} : load_dict(o.dict);
  for (const auto& c : corpus) run_one(c);
  const double replay_s = elapsed();

  mutator m(o.seed, corpus, dict, o.max_len);
  g_seed = o.seed;
  g_mutating.store(true);
  std::uint64_t runs = 0;
  for (; runs < o.runs && elapsed() < o.seconds; ++runs) {
    g_iteration.store(runs);
    run_one(m.next());
  }
  stop.store(true);
  dog.join();

  const double total = elapsed();
  std::printf(
      "fuzz: %zu corpus inputs replayed in %.2f s, %llu mutations (seed %llu) in %.2f s, "
      "%.0f runs/s, %zu dictionary tokens, %llu inputs accepted\n",
      corpus.size(), replay_s, static_cast<unsigned long long>(runs),
      static_cast<unsigned long long>(o.seed), total - replay_s,
      runs / std::max(total - replay_s, 1e-9), dict.size(),
      static_cast<unsigned long long>(g_accepted.load()));
  if (!o.time_file.empty()) {
    fs::create_directories(fs::path(o.time_file).parent_path(), ec);
    std::ofstream(o.time_file) << total << "\n";
  }
  if (o.limit > 0 && total > o.limit) {
    std::fprintf(stderr, "fuzz: the run took %.1f s, over its %.1f s limit\n", total, o.limit);
    return 1;
  }
  return 0;
}
