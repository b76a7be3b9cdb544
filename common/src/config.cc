// The configuration walker: the mode-specific work behind binder (load, validate, print,
// defaults, diff, docs), the entry points that drive a config struct's describe() through those
// modes, and the daemon command line.

#include "common/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace shoal::config {
namespace detail {

// State shared by every binder of one walk. Lives on the stack of one run_* call; one thread.
class walk_state {
 public:
  explicit walk_state(binder::mode m) : mode(m) {}

  binder root(const node* n) { return binder(*this, mode, "", "", n, 0); }
  static void finish(binder& b) { b.finish_load(); }

  void add_error(std::string msg) {
    if (errors.size() < k_max_errors)
      errors.push_back(std::move(msg));
    else
      ++suppressed;
  }
  [[nodiscard]] status result_status() const {
    if (errors.empty()) return {};
    std::string msg;
    for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
    if (suppressed > 0) msg += "\n(" + std::to_string(suppressed) + " more errors)";
    return fail(errc::config_error, msg);
  }
  // The "file:line" where `path` or its nearest enclosing key was set, or "".
  [[nodiscard]] std::string origin_of(std::string path) const {
    while (true) {
      if (auto it = origin.find(path); it != origin.end()) return it->second;
      const std::size_t cut = path.find_last_of(".[");
      if (cut == std::string::npos) return {};
      path.resize(cut);
    }
  }

  // Print mode: one output line at the current indentation; the first key line of a list item
  // carries the "- " marker, and comments before it sit at the marker's column.
  void emit(const std::string& text, bool comment) {
    if (pending_dash) {
      const std::string pad(static_cast<std::size_t>(std::max(indent - 2, 0)), ' ');
      if (comment) {
        lines.push_back(pad + text);
        return;
      }
      lines.push_back(pad + "- " + text);
      pending_dash = false;
      return;
    }
    lines.push_back(std::string(static_cast<std::size_t>(indent), ' ') + text);
  }
  void close_empty_item() {
    if (!pending_dash) return;
    lines.push_back(std::string(static_cast<std::size_t>(std::max(indent - 2, 0)), ' ') + "- {}");
    pending_dash = false;
  }

  struct row {
    std::string key, type, def, doc;
  };
  struct table {
    std::string path, doc;
    std::vector<row> rows;
  };

  static constexpr std::size_t k_max_errors = 50;

  binder::mode mode;
  std::string file;
  std::vector<std::string> errors;
  std::size_t suppressed = 0;
  std::map<std::string, std::string> origin;
  bool check_required = false;
  std::vector<std::string> lines;
  int indent = 0;
  bool pending_dash = false;
  struct open_block {
    std::size_t line;
    int indent;
  };
  std::vector<open_block> open;
  std::map<std::string, std::string> defaults;
  std::vector<std::pair<std::string, std::string>> diffs;
  std::vector<table> tables;
};

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string where(const std::string& file, int line) {
  return line > 0 ? file + ":" + std::to_string(line) : file;
}

std::vector<std::string> comment_lines(std::string_view doc) {
  std::vector<std::string> out;
  while (!doc.empty()) {
    const std::size_t nl = doc.find('\n');
    out.push_back("# " + std::string(doc.substr(0, nl)));
    if (nl == std::string_view::npos) break;
    doc.remove_prefix(nl + 1);
  }
  return out;
}

void zero_positions(node& n) {
  n.line = 0;
  n.column = 0;
  for (auto& i : n.items) zero_positions(i);
  for (auto& e : n.entries) {
    e.line = 0;
    e.column = 0;
    zero_positions(e.value);
  }
}

// The document of a --set layer: the value nested under the dotted key path.
result<node> set_document(const source& s) {
  auto value = parse_yaml(s.text, s.name);
  if (!value) return fail(value.error());
  zero_positions(*value);
  std::vector<std::string> parts;
  std::string_view p = s.set_path;
  while (true) {
    const std::size_t dot = p.find('.');
    parts.emplace_back(p.substr(0, dot));
    if (parts.back().empty() || parts.back().find('[') != std::string::npos) {
      return fail(errc::config_error,
                  s.name + ": bad key path \"" + s.set_path +
                      "\" (dotted keys like cache.max_bytes; lists are set as a whole)");
    }
    if (dot == std::string_view::npos) break;
    p.remove_prefix(dot + 1);
  }
  node doc = std::move(*value);
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    node m;
    m.k = node::kind::map;
    m.entries.push_back(entry{*it, std::move(doc), 0, 0});
    doc = std::move(m);
  }
  return doc;
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string md_code(std::string_view s) {
  if (s.empty()) return "";
  if (s.find('`') != std::string_view::npos) return md_cell(s);
  return "`" + md_cell(s) + "`";
}

}  // namespace

status run_load(std::span<const source> layers, const root_fn& root) {
  walk_state st(binder::mode::load);
  for (const auto& layer : layers) {
    auto doc = layer.set_path.empty() ? parse_yaml(layer.text, layer.name) : set_document(layer);
    if (!doc) return fail(doc.error());
    if (doc->k == node::kind::null) continue;  // an empty file sets nothing
    st.file = layer.name;
    if (doc->k != node::kind::map) {
      st.add_error(where(layer.name, doc->line) +
                   ": expected a map of keys at the top level, got " + describe_node(*doc));
      continue;
    }
    binder b = st.root(&*doc);
    root(b);
    walk_state::finish(b);
  }
  if (!st.errors.empty()) return st.result_status();
  st.mode = binder::mode::validate;
  st.check_required = true;
  binder b = st.root(nullptr);
  root(b);
  return st.result_status();
}

status run_validate(const root_fn& root) {
  walk_state st(binder::mode::validate);
  binder b = st.root(nullptr);
  root(b);
  return st.result_status();
}

std::string run_print(const root_fn& root, const root_fn& defaults_root) {
  walk_state st(binder::mode::defaults);
  {
    binder b = st.root(nullptr);
    defaults_root(b);
  }
  st.mode = binder::mode::print;
  binder b = st.root(nullptr);
  root(b);
  std::string out;
  for (const auto& l : st.lines) out += l + "\n";
  return out;
}

std::vector<std::pair<std::string, std::string>> run_diff(const root_fn& root,
                                                          const root_fn& defaults_root) {
  walk_state st(binder::mode::defaults);
  {
    binder b = st.root(nullptr);
    defaults_root(b);
  }
  st.mode = binder::mode::diff;
  binder b = st.root(nullptr);
  root(b);
  return std::move(st.diffs);
}

std::string run_docs(const root_fn& defaults_root, std::string_view title) {
  walk_state st(binder::mode::docs);
  st.tables.push_back({});
  binder b = st.root(nullptr);
  defaults_root(b);
  std::string out = "# " + std::string(title) + " configuration reference\n\n";
  out += "Generated by `" + std::string(title) +
         " --print-config-docs`. Every key is optional unless its default says *required*.\n";
  for (const auto& t : st.tables) {
    if (t.rows.empty()) continue;
    out += "\n## " + (t.path.empty() ? std::string("Top level") : "`" + t.path + "`") + "\n\n";
    if (!t.doc.empty()) out += md_cell(t.doc) + "\n\n";
    out += "| Key | Type | Default | Description |\n|---|---|---|---|\n";
    for (const auto& r : t.rows) {
      out += "| `" + md_cell(r.key) + "` | " + md_cell(r.type) + " | " +
             (r.def == "required" ? std::string("*required*") : md_code(r.def)) + " | " +
             md_cell(r.doc) + " |\n";
    }
  }
  return out;
}

result<std::string> read_text_file(const std::string& path) {
  // Config files are small; the cap keeps a wrong path (a device, a huge log) from eating memory.
  constexpr std::size_t k_max_size = 16u << 20;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return fail(errc::config_error, "config file " + path + ": " + std::strerror(errno));
  }
  std::string text;
  char buf[65536];
  while (true) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    text.append(buf, n);
    if (text.size() > k_max_size) {
      std::fclose(f);
      return fail(errc::config_error, "config file " + path + ": larger than 16 MiB");
    }
    if (n < sizeof buf) break;
  }
  const bool bad = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (bad) return fail(errc::config_error, "config file " + path + ": " + std::strerror(err));
  return text;
}

result<cli_request> parse_cli(int argc, const char* const* argv) {
  cli_request req;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i] != nullptr ? argv[i] : "";
    std::string value;
    bool has_value = false;
    std::string_view flag = a;
    if (a.starts_with("--") && a.find('=') != std::string_view::npos) {
      flag = a.substr(0, a.find('='));
      value = std::string(a.substr(a.find('=') + 1));
      has_value = true;
    }
    auto take_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc || argv[i + 1] == nullptr) return false;
      value = argv[++i];
      return true;
    };
    if (flag == "-c" || flag == "--config") {
      if (!take_value()) return fail(errc::config_error, std::string(flag) + " needs a file name");
      req.files.push_back(value);
    } else if (flag == "--set") {
      if (!take_value()) return fail(errc::config_error, "--set needs KEY=VALUE");
      const std::size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) {
        return fail(errc::config_error, "--set " + value + ": expected KEY=VALUE");
      }
      req.sets.push_back(source{"--set " + value, value.substr(eq + 1), value.substr(0, eq)});
    } else if (flag == "--print-config" && !has_value) {
      req.print_config = true;
    } else if (flag == "--print-config-docs" && !has_value) {
      req.print_docs = true;
    } else if ((flag == "-h" || flag == "--help") && !has_value) {
      req.help = true;
    } else {
      return fail(errc::config_error, "unknown argument \"" + std::string(a) + "\" (see --help)");
    }
  }
  return req;
}

std::string cli_help(std::string_view daemon_name) {
  const std::string n(daemon_name);
  std::string usage =
      "usage: " + n + " [-c FILE]... [--set KEY=VALUE]... [--print-config] [--print-config-docs]\n";
  usage += "       " + n + " --version\n\n";
  return usage +
         "  -c, --config FILE        load a YAML config file; repeat to layer files (later wins)\n"
         "      --set KEY=VALUE      override one key after the files, e.g. --set "
         "log.level=debug\n"
         "      --print-config       print the effective configuration as YAML and exit\n"
         "      --print-config-docs  print the reference of every key as Markdown and exit\n"
         "      --version            print the version and the libraries' versions and exit\n"
         "  -h, --help               print this help and exit\n";
}

}  // namespace detail

// ---- binder ------------------------------------------------------------------------------

binder::binder(detail::walk_state& st, mode m, std::string path, std::string schema_path,
               const detail::node* map_node, int table)
    : st_(&st),
      mode_(m),
      path_(std::move(path)),
      schema_path_(std::move(schema_path)),
      node_(map_node),
      table_(table) {}

std::string binder::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

std::string binder::child_schema(std::string_view key) const {
  return schema_path_.empty() ? std::string(key) : schema_path_ + "." + std::string(key);
}

const detail::node* binder::take(std::string_view key) {
  if (std::find(declared_.begin(), declared_.end(), key) != declared_.end()) {
    st_->add_error("internal: describe() binds \"" + child_path(key) + "\" twice");
    return nullptr;
  }
  declared_.emplace_back(key);
  if (node_ == nullptr) return nullptr;
  for (const auto& e : node_->entries) {
    if (e.key == key) {
      st_->origin[child_path(key)] = detail::where(st_->file, e.line);
      return &e.value;
    }
  }
  return nullptr;
}

void binder::report(const detail::node& at, std::string_view path, std::string_view message) {
  std::string msg = detail::where(st_->file, at.line) + ": ";
  if (!path.empty()) msg += std::string(path) + ": ";
  st_->add_error(msg + std::string(message));
}

void binder::report_missing(std::string_view path, std::string_view message) {
  const std::string origin = st_->origin_of(std::string(path));
  st_->add_error((origin.empty() ? "" : origin + ": ") + std::string(path) + ": " +
                 std::string(message));
}

void binder::report_invalid(const std::string& path, std::string_view why) {
  const std::string origin = st_->origin_of(path);
  st_->add_error((origin.empty() ? "" : origin + ": ") + path + ": " + std::string(why) +
                 (origin.empty() ? " (the default value)" : ""));
}

void binder::forget_origins(std::string_view key) {
  const std::string prefix = child_path(key) + "[";
  auto it = st_->origin.lower_bound(prefix);
  while (it != st_->origin.end() && it->first.starts_with(prefix)) it = st_->origin.erase(it);
}

void binder::finish_load() {
  if (node_ == nullptr) return;
  for (const auto& e : node_->entries) {
    if (std::find(declared_.begin(), declared_.end(), e.key) != declared_.end()) continue;
    std::string msg = detail::where(st_->file, e.line) + ": " + child_path(e.key) + ": unknown key";
    std::size_t best = 3;
    std::string suggestion;
    for (const auto& k : declared_) {
      const std::size_t d = detail::edit_distance(e.key, k);
      if (d < best) {
        best = d;
        suggestion = k;
      }
    }
    if (!suggestion.empty()) msg += " (did you mean \"" + suggestion + "\"?)";
    st_->add_error(msg);
  }
}

binder binder::child(std::string_view key, const detail::node* n) {
  return binder(*st_, mode_, child_path(key), child_schema(key), n, table_);
}

binder binder::item(std::string_view key, std::size_t index, const detail::node* n) {
  std::string path = child_path(key) + "[" + std::to_string(index) + "]";
  if (mode_ == mode::load && n != nullptr) st_->origin[path] = detail::where(st_->file, n->line);
  return binder(*st_, mode_, std::move(path), child_schema(key) + "[]", n, table_);
}

bool binder::expect_map(const detail::node& n, std::string_view path) {
  if (n.k == detail::node::kind::map || n.k == detail::node::kind::null) return true;
  report(n, path, "expected a map, got " + detail::describe_node(n));
  return false;
}

void binder::require(std::string_view key) {
  if (!st_->check_required) return;
  // Inside a list item that no layer provided (a default item, or one set in code), there is no
  // file to have forgotten the key: only items read from a layer must carry their required keys.
  if (const std::size_t close = path_.rfind(']');
      close != std::string::npos && !st_->origin.contains(path_.substr(0, close + 1))) {
    return;
  }
  const std::string path = child_path(key);
  if (st_->origin.contains(path)) return;
  report_missing(path, "required key is missing");
}

void binder::check(bool ok, std::string_view message) {
  if (mode_ != mode::validate || ok) return;
  const std::string origin = st_->origin_of(path_);
  std::string msg = origin.empty() ? "" : origin + ": ";
  if (!path_.empty()) msg += path_ + ": ";
  st_->add_error(msg + std::string(message));
}

void binder::print_field(std::string_view key, std::string_view doc, const std::string& flow,
                         const std::vector<std::string>& block, bool note_default) {
  for (const auto& c : detail::comment_lines(doc)) st_->emit(c, true);
  // A required key's default is only a placeholder, not worth a note.
  if (auto it = st_->defaults.find(child_schema(key));
      note_default && it != st_->defaults.end() && it->second != flow) {
    st_->emit("# default: " + it->second, true);
  }
  if (block.empty()) {
    st_->emit(std::string(key) + ": " + flow, false);
    return;
  }
  st_->emit(std::string(key) + ":", false);
  st_->indent += 2;
  for (const auto& l : block) st_->emit(l, false);
  st_->indent -= 2;
}

void binder::print_begin(std::string_view key, std::string_view doc, bool list, bool empty) {
  for (const auto& c : detail::comment_lines(doc)) st_->emit(c, true);
  st_->emit(std::string(key) + ":" + (list && empty ? " []" : ""), false);
  st_->open.push_back({st_->lines.size() - 1, st_->indent});
  st_->indent += list ? 4 : 2;
}

void binder::print_item_begin() {
  st_->close_empty_item();
  st_->pending_dash = true;
}

void binder::print_end(bool list) {
  if (list) st_->close_empty_item();
  const auto open = st_->open.back();
  st_->open.pop_back();
  st_->indent = open.indent;
  if (!list && open.line + 1 == st_->lines.size()) st_->lines.back() += " {}";
}

void binder::record_default(std::string_view key, const std::string& flow) {
  st_->defaults[child_schema(key)] = flow;
}

void binder::diff_field(std::string_view key, const std::string& flow) {
  auto it = st_->defaults.find(child_schema(key));
  if (it == st_->defaults.end() || it->second != flow)
    st_->diffs.emplace_back(child_path(key), flow);
}

void binder::doc_row(std::string_view key, std::string type, std::string def, std::string doc) {
  auto& t = st_->tables[static_cast<std::size_t>(table_)];
  t.rows.push_back({child_schema(key), std::move(type), std::move(def), std::move(doc)});
}

int binder::doc_table(std::string_view key, std::string_view doc, bool list) {
  doc_row(key, list ? "list of maps" : "section", list ? "[]" : "",
          std::string(doc) + (list ? " Each item: see `" + child_schema(key) + "[]` below."
                                   : " See `" + child_schema(key) + "` below."));
  st_->tables.push_back({child_schema(key) + (list ? "[]" : ""), std::string(doc), {}});
  return static_cast<int>(st_->tables.size() - 1);
}

}  // namespace shoal::config
