#include "netsetup/sysfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <deque>

#include "common/fd.h"
#include "netsetup/errc.h"

namespace shoal::netsetup {
namespace {

constexpr std::size_t max_file_bytes = 64 * 1024;
constexpr int max_link_follows = 40;

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' ||
                        s.back() == '\r' || s.back() == '\0')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string_view trim(std::string_view s) {
  s = trim_right(s);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::vector<std::string> split_path(std::string_view p) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i <= p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    if (j > i) out.emplace_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string join_path(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& c : parts) {
    s += '/';
    s += c;
  }
  return s.empty() ? "/" : s;
}

error sys_error(errc code, std::string msg) { return error{make_error_code(code), std::move(msg)}; }

error errno_to(int err, std::string_view what, std::string_view path) {
  errc c = err == ENOENT || err == ENOTDIR ? errc::sysfs_missing : errc::sysfs_io;
  return sys_error(c, std::string(what) + " " + std::string(path) + ": " + std::strerror(err));
}

}  // namespace

std::string quote_excerpt(std::string_view text) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char ch : text) {
    if (++n > 40) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(ch);
    if (u == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

result<std::int64_t> parse_int(std::string_view text, std::string_view where) {
  std::string_view t = trim(text);
  if (t.empty()) {
    return fail(make_error_code(errc::sysfs_garbage),
                std::string(where) + ": empty, expected an integer");
  }
  std::int64_t v = 0;
  const char* b = t.data();
  if (*b == '+') ++b;
  auto [ptr, ec] = std::from_chars(b, t.data() + t.size(), v, 10);
  if (ec != std::errc{} || ptr != t.data() + t.size()) {
    return fail(make_error_code(errc::sysfs_garbage),
                std::string(where) + ": expected an integer, got " + quote_excerpt(t));
  }
  return v;
}

result<std::optional<int>> parse_traffic_class(std::string_view text, std::string_view where) {
  std::string_view t = trim(text);
  if (t.empty()) return std::optional<int>{};
  auto bad = [&] {
    return fail(make_error_code(errc::sysfs_garbage),
                std::string(where) + ": expected a traffic class 0..255, got " + quote_excerpt(t));
  };
  // The first line holds the port's class; the others, per-destination rules.
  std::string_view line = trim(t.substr(0, t.find('\n')));
  constexpr std::string_view global = "Global tclass=";
  if (line.starts_with(global)) line.remove_prefix(global.size());
  if (line == "-1") return std::optional<int>{};
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), v, 10);
  if (line.empty() || ec != std::errc{} || ptr != line.data() + line.size() || v < 0 || v > 255)
    return bad();
  return std::optional<int>{static_cast<int>(v)};
}

result<std::uint32_t> parse_hex(std::string_view text, std::string_view where) {
  std::string_view t = trim(text);
  if (t.empty()) {
    return fail(make_error_code(errc::sysfs_garbage),
                std::string(where) + ": empty, expected a hex number like 0x15b3");
  }
  std::string_view digits = t;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
  } else {
    return fail(
        make_error_code(errc::sysfs_garbage),
        std::string(where) + ": expected a hex number like 0x15b3, got " + quote_excerpt(t));
  }
  std::uint32_t v = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
  if (ec != std::errc{} || ptr != digits.data() + digits.size()) {
    return fail(
        make_error_code(errc::sysfs_garbage),
        std::string(where) + ": expected a hex number like 0x15b3, got " + quote_excerpt(t));
  }
  return v;
}

result<std::optional<double>> parse_link_speed(std::string_view text, std::string_view where) {
  std::string_view t = trim(text);
  if (t.starts_with("Unknown")) return std::optional<double>{};
  const char* end = t.data() + t.size();
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), end, v);
  std::string_view rest(ptr, static_cast<std::size_t>(end - ptr));
  if (t.empty() || ec != std::errc{} || !(v > 0) || v > 1000 || !rest.starts_with(" GT/s")) {
    return fail(make_error_code(errc::sysfs_garbage),
                std::string(where) + ": expected a PCIe speed like \"16.0 GT/s PCIe\", got " +
                    quote_excerpt(t));
  }
  return std::optional<double>{v};
}

sysfs::sysfs(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string sysfs::path(std::string_view kernel_path) const {
  std::string p = root_;
  if (kernel_path.empty() || kernel_path.front() != '/') p += '/';
  p += kernel_path;
  return p;
}

bool sysfs::exists(std::string_view p) const {
  struct stat st {};
  return ::stat(path(p).c_str(), &st) == 0;
}

bool sysfs::is_dir(std::string_view p) const {
  struct stat st {};
  return ::stat(path(p).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

result<std::string> sysfs::read(std::string_view p) const {
  const std::string full = path(p);
  unique_fd fd(::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return fail(errno_to(errno, "open", full));
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return fail(sys_error(errc::sysfs_garbage, full + ": is a directory, expected a file"));
  }
  std::string buf;
  buf.resize(max_file_bytes + 1);
  std::size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::read(fd.get(), buf.data() + got, buf.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno_to(errno, "read", full));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_file_bytes) {
    return fail(sys_error(errc::sysfs_garbage, full + ": larger than 64 KiB, not a sysfs value"));
  }
  buf.resize(got);
  return std::string(trim_right(buf));
}

result<std::optional<std::string>> sysfs::read_optional(std::string_view p) const {
  auto r = read(p);
  if (!r) {
    if (r.error().code == make_error_code(errc::sysfs_missing)) {
      return std::optional<std::string>{};
    }
    return fail(r.error());
  }
  return std::optional<std::string>{std::move(*r)};
}

result<std::int64_t> sysfs::read_int(std::string_view p) const {
  auto t = read(p);
  if (!t) return fail(t.error());
  return parse_int(*t, path(p));
}

result<std::optional<std::int64_t>> sysfs::read_int_optional(std::string_view p) const {
  auto t = read_optional(p);
  if (!t) return fail(t.error());
  if (!*t) return std::optional<std::int64_t>{};
  auto v = parse_int(**t, path(p));
  if (!v) return fail(v.error());
  return std::optional<std::int64_t>{*v};
}

result<std::uint32_t> sysfs::read_hex(std::string_view p) const {
  auto t = read(p);
  if (!t) return fail(t.error());
  return parse_hex(*t, path(p));
}

result<std::vector<std::string>> sysfs::list(std::string_view dir) const {
  const std::string full = path(dir);
  DIR* d = ::opendir(full.c_str());
  if (d == nullptr) return fail(errno_to(errno, "list", full));
  std::vector<std::string> names;
  // A sysfs directory has at most a few thousand entries; the bound keeps a corrupt tree from
  // exhausting memory.
  constexpr std::size_t max_entries = 65536;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    if (names.size() >= max_entries) break;
    names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

result<std::vector<std::string>> sysfs::list_optional(std::string_view dir) const {
  auto r = list(dir);
  if (!r && r.error().code == make_error_code(errc::sysfs_missing)) {
    return std::vector<std::string>{};
  }
  return r;
}

result<std::string> sysfs::resolve(std::string_view p) const {
  std::deque<std::string> todo;
  for (auto& c : split_path(p)) todo.push_back(std::move(c));
  std::vector<std::string> out;
  int follows = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      // Clamped at the root: a link can never lead outside the tree we were given.
      if (!out.empty()) out.pop_back();
      continue;
    }
    out.push_back(c);
    const std::string real = root_ + join_path(out);
    struct stat st {};
    if (::lstat(real.c_str(), &st) != 0) {
      const int err = errno;
      if (follows > 0 && err == ENOENT) {
        return fail(sys_error(errc::sysfs_missing,
                              path(p) + ": dangling link (" + join_path(out) + " does not exist)"));
      }
      return fail(errno_to(err, "resolve", path(p)));
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++follows > max_link_follows) {
      return fail(sys_error(errc::sysfs_garbage, path(p) + ": too many levels of symbolic links"));
    }
    char buf[PATH_MAX];
    ssize_t n = ::readlink(real.c_str(), buf, sizeof(buf) - 1);
    if (n < 0) return fail(errno_to(errno, "readlink", real));
    std::string_view target(buf, static_cast<std::size_t>(n));
    if (target.empty()) {
      return fail(sys_error(errc::sysfs_garbage, real + ": empty symbolic link"));
    }
    out.pop_back();
    if (target.front() == '/') out.clear();
    auto parts = split_path(target);
    todo.insert(todo.begin(), parts.begin(), parts.end());
  }
  return join_path(out);
}

result<std::optional<std::string>> sysfs::link_basename(std::string_view p) const {
  const std::string full = path(p);
  struct stat st {};
  if (::lstat(full.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<std::string>{};
    return fail(errno_to(errno, "lstat", full));
  }
  if (!S_ISLNK(st.st_mode)) return std::optional<std::string>{};
  char buf[PATH_MAX];
  ssize_t n = ::readlink(full.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) return fail(errno_to(errno, "readlink", full));
  std::string_view target(buf, static_cast<std::size_t>(n));
  while (!target.empty() && target.back() == '/') target.remove_suffix(1);
  auto slash = target.rfind('/');
  std::string base(slash == std::string_view::npos ? target : target.substr(slash + 1));
  if (base.empty() || base == "." || base == "..") {
    // A target like "../.." names its directory only once resolved.
    auto resolved = resolve(p);
    if (!resolved) return fail(resolved.error());
    base = resolved->substr(resolved->rfind('/') + 1);
    if (base.empty()) {
      return fail(sys_error(errc::sysfs_garbage, full + ": link points at the root"));
    }
  }
  return std::optional<std::string>{std::move(base)};
}

status sysfs::write(std::string_view p, std::string_view value) const {
  const std::string full = path(p);
  // O_TRUNC is ignored by sysfs and needed for the regular files of a test tree.
  unique_fd fd(::open(full.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY));
  if (!fd) return fail(errno_to(errno, "open for writing", full));
  std::string data(value);
  data += '\n';
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno_to(errno, "write \"" + std::string(value) + "\" to", full));
    }
    off += static_cast<std::size_t>(n);
  }
  if (::close(fd.release()) != 0) {
    return fail(errno_to(errno, "write \"" + std::string(value) + "\" to", full));
  }
  return {};
}

}  // namespace shoal::netsetup
