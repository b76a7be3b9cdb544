// mirror_setup.h: the check of containerd's config_path, on a minimal TOML reader (no TOML
// library is linked; this reads every construct of TOML 1.0 well enough to find one key).

#include <glob.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "peerd/mirror_setup.h"

#include "common/utf8.h"

namespace shoal::peerd::mirror_setup {
namespace {

// Reads TOML text into toml_value rows. Values of arrays are recorded with a "[]" segment so
// they never match a key lookup; only strings are decoded.
class toml_reader {
 public:
  explicit toml_reader(std::string_view t) : t_(t) {}

  result<std::vector<toml_value>> run() {
    std::vector<std::string> table;
    while (!eof()) {
      skip_ws();
      if (eof()) break;
      if (at('#')) {
        skip_comment();
      } else if (at('\n') || at('\r')) {
        next();
      } else if (at('[')) {
        next();
        bool array = at('[');
        if (array) next();
        skip_ws();
        auto k = key();
        if (!k) return fail(k.error());
        skip_ws();
        if (!at(']') || (array && peek(1) != ']')) return err("expected ] after a table name");
        next();
        if (array) next();
        table = std::move(*k);
        if (array) table.push_back("[]");
        if (auto st = end_of_line(); !st) return fail(st.error());
      } else {
        if (auto st = key_value(table); !st) return fail(st.error());
        if (auto st = end_of_line(); !st) return fail(st.error());
      }
    }
    return std::move(out_);
  }

 private:
  bool eof() const { return i_ >= t_.size(); }
  char peek(std::size_t k = 0) const { return i_ + k < t_.size() ? t_[i_ + k] : '\0'; }
  bool at(char c) const { return !eof() && t_[i_] == c; }
  bool at(std::string_view s) const { return t_.substr(i_, s.size()) == s; }
  char next() {
    char c = t_[i_++];
    if (c == '\n') ++line_;
    return c;
  }
  void skip_ws() {
    while (at(' ') || at('\t')) next();
  }
  void skip_comment() {
    while (!eof() && !at('\n')) next();
  }
  // Inside arrays: blanks, newlines and comments.
  void skip_all() {
    for (;;) {
      skip_ws();
      if (at('#'))
        skip_comment();
      else if (at('\n') || at('\r'))
        next();
      else
        return;
    }
  }
  std::unexpected<error> err(const std::string& msg) const {
    return fail(errc::invalid_argument, "line " + std::to_string(line_) + ": " + msg);
  }
  status end_of_line() {
    skip_ws();
    if (at('#')) skip_comment();
    if (at('\r')) next();
    if (eof()) return {};
    if (!at('\n')) return err("unexpected text after a value");
    next();
    return {};
  }

  result<std::vector<std::string>> key() {
    std::vector<std::string> segs;
    for (;;) {
      skip_ws();
      std::string seg;
      if (at('"') || at('\'')) {
        auto s = at('"') ? basic_string() : literal_string();
        if (!s) return fail(s.error());
        seg = std::move(*s);
      } else {
        while (!eof() && (std::isalnum(static_cast<unsigned char>(peek())) || at('_') || at('-')))
          seg += next();
        if (seg.empty()) return err("expected a key");
      }
      segs.push_back(std::move(seg));
      skip_ws();
      if (!at('.')) return segs;
      next();
    }
  }

  status key_value(const std::vector<std::string>& prefix) {
    auto k = key();
    if (!k) return fail(k.error());
    skip_ws();
    if (!at('=')) return err("expected = after a key");
    next();
    skip_ws();
    std::vector<std::string> path = prefix;
    path.insert(path.end(), k->begin(), k->end());
    return value(std::move(path));
  }

  status value(std::vector<std::string> path) {
    const int line = line_;
    if (at("\"\"\"") || at("'''")) {
      auto s = multiline(at('"'));
      if (!s) return fail(s.error());
      out_.push_back({std::move(path), std::move(*s), true, line});
    } else if (at('"') || at('\'')) {
      auto s = at('"') ? basic_string() : literal_string();
      if (!s) return fail(s.error());
      out_.push_back({std::move(path), std::move(*s), true, line});
    } else if (at('[')) {
      next();
      path.push_back("[]");
      for (;;) {
        skip_all();
        if (at(']')) break;
        if (auto st = value(path); !st) return st;
        skip_all();
        if (at(',')) {
          next();
        } else if (!at(']')) {
          return err("expected , or ] in an array");
        }
      }
      next();
    } else if (at('{')) {
      next();
      for (;;) {
        skip_ws();
        if (at('}')) break;
        if (auto st = key_value(path); !st) return st;
        skip_ws();
        if (at(',')) {
          next();
        } else if (!at('}')) {
          return err("expected , or } in an inline table");
        }
      }
      next();
    } else {
      // Numbers, booleans, dates ("1979-05-27 07:32:00Z" holds one space).
      std::string raw;
      while (!eof() && !std::strchr(" \t\r\n,]}#", peek())) raw += next();
      if (raw.size() == 10 && raw[4] == '-' && at(' ') &&
          std::isdigit(static_cast<unsigned char>(peek(1)))) {
        raw += next();
        while (!eof() && !std::strchr(" \t\r\n,]}#", peek())) raw += next();
      }
      if (raw.empty()) return err("expected a value");
      out_.push_back({std::move(path), std::move(raw), false, line});
    }
    return {};
  }

  result<std::string> literal_string() {
    next();
    std::string s;
    while (!at('\'')) {
      if (eof() || at('\n')) return err("unterminated string");
      s += next();
    }
    next();
    return s;
  }

  status escape(std::string& s) {
    next();  // the backslash
    if (eof()) return err("unterminated escape");
    char c = next();
    switch (c) {
      case 'b':
        s += '\b';
        return {};
      case 't':
        s += '\t';
        return {};
      case 'n':
        s += '\n';
        return {};
      case 'f':
        s += '\f';
        return {};
      case 'r':
        s += '\r';
        return {};
      case '"':
        s += '"';
        return {};
      case '\\':
        s += '\\';
        return {};
      case 'u':
      case 'U': {
        const std::size_t n = c == 'u' ? 4 : 8;
        unsigned long cp = 0;
        for (std::size_t k = 0; k < n; ++k) {
          if (!std::isxdigit(static_cast<unsigned char>(peek()))) return err("bad \\u escape");
          cp = cp * 16 + static_cast<unsigned long>(std::stoi(std::string(1, next()), nullptr, 16));
        }
        utf8_append(s, static_cast<std::uint32_t>(cp));
        return {};
      }
      default:
        return err(std::string("unknown escape \\") + c);
    }
  }

  result<std::string> basic_string() {
    next();
    std::string s;
    while (!at('"')) {
      if (eof() || at('\n')) return err("unterminated string");
      if (at('\\')) {
        if (auto st = escape(s); !st) return fail(st.error());
      } else {
        s += next();
      }
    }
    next();
    return s;
  }

  result<std::string> multiline(bool basic) {
    const std::string_view close = basic ? "\"\"\"" : "'''";
    i_ += 3;
    if (at("\r\n")) next();
    if (at('\n')) next();
    std::string s;
    for (;;) {
      if (eof()) return err("unterminated multi-line string");
      if (at(close)) {
        i_ += 3;
        // Up to two quotes may end the content right before the delimiter.
        for (int k = 0; k < 2 && at(close[0]); ++k) s += next();
        return s;
      }
      if (basic && at('\\')) {
        std::size_t k = 1;
        while (peek(k) == ' ' || peek(k) == '\t' || peek(k) == '\r') ++k;
        if (peek(k) == '\n') {  // line-ending backslash: drop the newline and the blanks after
          next();
          while (at(' ') || at('\t') || at('\r') || at('\n')) next();
          continue;
        }
        if (auto st = escape(s); !st) return fail(st.error());
        continue;
      }
      s += next();
    }
  }

  std::string_view t_;
  std::size_t i_ = 0;
  int line_ = 1;
  std::vector<toml_value> out_;
};

std::string canonical(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) != nullptr) return buf;
  return p;
}

// The CRI plugin's table for each config version (containerd 1.x: 1 and 2; 2.x: 3).
std::vector<std::string> registry_table(int version) {
  if (version >= 3) return {"plugins", "io.containerd.cri.v1.images", "registry"};
  if (version == 2) return {"plugins", "io.containerd.grpc.v1.cri", "registry"};
  return {"plugins", "cri", "registry"};
}

std::string table_header(int version) {
  std::string h = "[";
  for (const auto& seg : registry_table(version)) {
    if (h.size() > 1) h += '.';
    h += seg.find('.') == std::string::npos ? seg : "\"" + seg + "\"";
  }
  return h + "]";
}

struct found {
  std::string file;
  int line = 0;
  std::string value;
};

// Reads one config file: its version and the config_path it sets (if any).
status scan(const std::string& file, int* version, std::optional<found>& config_path,
            std::vector<std::string>* imports) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail_errno(errno, "read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto rows = parse_toml(ss.str());
  if (!rows) return fail(rows.error().wrap(file));
  int v = 1;
  for (const auto& r : *rows) {
    if (r.path == std::vector<std::string>{"version"} && !r.is_string)
      v = std::atoi(r.value.c_str());
  }
  if (version != nullptr) *version = v;
  auto want = registry_table(v);
  want.push_back("config_path");
  for (const auto& r : *rows) {
    if (r.path == want) config_path = found{file, r.line, r.value};
    if (imports != nullptr && r.is_string && r.path == std::vector<std::string>{"imports", "[]"})
      imports->push_back(r.value);
  }
  return {};
}

}  // namespace

result<std::vector<toml_value>> parse_toml(std::string_view text) {
  return toml_reader(text).run();
}

result<config_path_check> check_containerd_config(const std::string& toml_path,
                                                  const std::string& certs_dir) {
  std::string certs = certs_dir;
  while (certs.size() > 1 && certs.back() == '/') certs.pop_back();
  int version = 2;
  std::optional<found> setting;
  std::string reason;
  if (::access(toml_path.c_str(), F_OK) != 0 && errno == ENOENT) {
    reason = toml_path + " does not exist (containerd then runs without config_path)";
  } else {
    std::vector<std::string> imports;
    if (auto st = scan(toml_path, &version, setting, &imports); !st) return fail(st.error());
    // containerd merges the imported files over the main one, in order (later wins).
    const std::string dir = toml_path.substr(0, toml_path.find_last_of('/') + 1);
    for (const auto& pattern : imports) {
      std::string p = !pattern.empty() && pattern[0] == '/' ? pattern : dir + pattern;
      glob_t g{};
      if (::glob(p.c_str(), 0, nullptr, &g) == 0) {
        for (std::size_t k = 0; k < g.gl_pathc; ++k) {
          if (auto st = scan(g.gl_pathv[k], nullptr, setting, nullptr); !st) {
            ::globfree(&g);
            return fail(st.error());
          }
        }
      }
      ::globfree(&g);
    }
    if (setting) {
      // config_path may list several directories (filepath.SplitList: ':').
      std::stringstream list(setting->value);
      for (std::string one; std::getline(list, one, ':');) {
        if (!one.empty() && canonical(one) == canonical(certs)) {
          return config_path_check{true, "containerd reads " + certs + " (" + setting->file + ":" +
                                             std::to_string(setting->line) + ")"};
        }
      }
      reason = setting->file + ":" + std::to_string(setting->line) + " sets config_path = \"" +
               setting->value + "\"";
    } else {
      reason = toml_path + " (version " + std::to_string(version) +
               ") sets no config_path for the CRI registry";
    }
  }
  std::string m = "containerd will not read the hosts.toml files in " + certs + ": " + reason +
                  ".\nPut these lines in " + toml_path +
                  " and restart containerd (replace a config_path already in\nthat table; "
                  "containerd refuses a `mirrors` table beside config_path, so move such\n"
                  "entries into hosts.toml files):\n\n";
  if (::access(toml_path.c_str(), F_OK) != 0) m += "version = 2\n\n";
  m += table_header(version) + "\n  config_path = \"" + certs + "\"\n\n";
  m += "Nothing was written. --no-check installs without this check.";
  return config_path_check{false, m};
}

}  // namespace shoal::peerd::mirror_setup
