#pragma once
// Daemon configuration: plain structs whose default member initializers are the defaults, and one
// `describe(binder&, T&)` per struct that binds every field once with its key and doc string.
// One generic walker drives that single description in every mode: load YAML onto the struct
// (type checks, unknown keys, "file:line: key.path: what is wrong"), validate (bounds, one-of,
// required keys, cross-field checks), print the effective config as commented YAML, and render a
// Markdown reference of every key with its type and default.
//
//   struct cache_config {
//     std::string dir = "/var/lib/shoal";
//     byte_size max_bytes = byte_size::gib(100);
//   };
//   void describe(binder& b, cache_config& c) {
//     b.field("dir", c.dir, "Directory holding the object store.");
//     b.field("max_bytes", c.max_bytes, "Evict above this size.", {.min = byte_size::mib(64)});
//   }
//   struct proxy_config { std::string listen = "0.0.0.0:5050"; cache_config cache; };
//   void describe(binder& b, proxy_config& c) {
//     b.field("listen", c.listen, "Address and port the HTTP API listens on.");
//     b.section("cache", c.cache, "Local object store.");
//   }
//   proxy_config cfg;
//   if (auto st = shoal::config::load_file("/etc/shoal/proxy.yaml", cfg); !st) { ... }
//
// `describe` must live in the namespace of its struct (it is found by argument-dependent lookup).
// Nothing here throws: yaml-cpp exceptions are caught at the parsing boundary and become errors.
// All functions are reentrant; a binder is a short-lived view used by one thread.

#include <chrono>
#include <compare>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/config_types.h"
#include "common/error.h"

namespace shoal::config {

// The view that `describe` functions bind fields through. The walker creates one per struct it
// visits and runs `describe` with it; depending on the mode, a call loads the field from YAML,
// validates it, prints it or documents it. Never constructed by user code; lives for one
// describe() call on one thread. In every mode but load the bound struct is only read.
class binder {
 public:
  enum class mode : std::uint8_t { load, validate, print, defaults, diff, docs };

  binder(const binder&) = delete;
  binder& operator=(const binder&) = delete;
  binder(binder&&) = default;

  // A scalar, an optional scalar, a list of scalars or a map of string to scalar.
  template <class T>
  void field(std::string_view key, T& value, std::string_view doc,
             const field_options<detail::option_value_t<T>>& opts = {});
  // A nested struct with its own describe(); its keys are "key.<field>".
  template <class T>
  void section(std::string_view key, T& value, std::string_view doc);
  // A list of structs, each with its own describe(); items are "key[i].<field>". A later layer
  // replaces the whole list.
  template <class T>
  void list(std::string_view key, std::vector<T>& items, std::string_view doc);
  // A cross-field rule, evaluated after every layer is loaded: b.check(c.lo <= c.hi, "lo > hi").
  void check(bool ok, std::string_view message);

  [[nodiscard]] mode current_mode() const noexcept { return mode_; }

 private:
  friend class detail::walk_state;

  binder(detail::walk_state& st, mode m, std::string path, std::string schema_path,
         const detail::node* map_node, int table);

  [[nodiscard]] std::string child_path(std::string_view key) const;
  [[nodiscard]] std::string child_schema(std::string_view key) const;
  // Load mode: declares `key`, returns its node (or nullptr) and records where it was set.
  const detail::node* take(std::string_view key);
  void report(const detail::node& at, std::string_view path, std::string_view message);
  void report_missing(std::string_view path, std::string_view message);
  void forget_origins(std::string_view key);
  // Ends a load-mode struct: every key of the node not declared by describe() is an error.
  void finish_load();
  [[nodiscard]] binder child(std::string_view key, const detail::node* n);
  [[nodiscard]] binder item(std::string_view key, std::size_t index, const detail::node* n);
  bool expect_map(const detail::node& n, std::string_view path);
  void report_invalid(const std::string& path, std::string_view why);
  void require(std::string_view key);
  void print_field(std::string_view key, std::string_view doc, const std::string& flow,
                   const std::vector<std::string>& block, bool note_default);
  void print_begin(std::string_view key, std::string_view doc, bool list, bool empty);
  void print_item_begin();
  void print_end(bool list);
  void record_default(std::string_view key, const std::string& flow);
  void diff_field(std::string_view key, const std::string& flow);
  void doc_row(std::string_view key, std::string type, std::string def, std::string doc);
  [[nodiscard]] int doc_table(std::string_view key, std::string_view doc, bool list);

  template <class T>
  bool decode(const detail::node& n, T& out, const std::string& path);
  template <class T, class U>
  void validate_value(const T& v, const field_options<U>& opts, const std::string& path);

  detail::walk_state* st_;
  mode mode_;
  std::string path_;          // "upstreams[1]": for error messages
  std::string schema_path_;   // "upstreams[]": for defaults and docs
  const detail::node* node_;  // load mode: the map this struct is read from
  std::vector<std::string> declared_;
  int table_ = 0;  // docs mode: the table this struct's rows go to
};

// Where a layer comes from: a file's text, or a "--set key.path=value" override.
struct source {
  std::string name;      // file path, or "--set key=value"
  std::string text;      // YAML document (for --set, the value alone)
  std::string set_path;  // non-empty for --set: the dotted key the value goes to
};

namespace detail {

// Parses one YAML document (the parsing boundary: yaml-cpp exceptions end here). An empty
// document is an empty map. Errors are "name:line:column: what".
[[nodiscard]] result<node> parse_yaml(std::string_view text, std::string_view name);

using root_fn = std::function<void(binder&)>;
// Loads the layers in order onto the struct behind `root`, then validates it (config.cc).
[[nodiscard]] status run_load(std::span<const source> layers, const root_fn& root);
[[nodiscard]] status run_validate(const root_fn& root);
[[nodiscard]] std::string run_print(const root_fn& root, const root_fn& defaults_root);
[[nodiscard]] std::vector<std::pair<std::string, std::string>> run_diff(
    const root_fn& root, const root_fn& defaults_root);
[[nodiscard]] std::string run_docs(const root_fn& defaults_root, std::string_view title);
[[nodiscard]] result<std::string> read_text_file(const std::string& path);

struct cli_request {
  std::vector<std::string> files;
  std::vector<source> sets;
  bool print_config = false;
  bool print_docs = false;
  bool help = false;
};
[[nodiscard]] result<cli_request> parse_cli(int argc, const char* const* argv);
[[nodiscard]] std::string cli_help(std::string_view daemon_name);

}  // namespace detail

// Loads one YAML document onto `cfg` (keys absent from the text keep their current value), then
// validates. `name` is used in messages ("registry-proxy.yaml:12: upstreams[1].auth: ..."). On
// error `cfg` is unchanged and the message lists every problem found, one per line.
template <class T>
[[nodiscard]] status load_string(std::string_view text, std::string_view name, T& cfg);
template <class T>
[[nodiscard]] status load_file(const std::string& path, T& cfg);
// Layers files in order: a later file's keys replace earlier ones; sections merge key by key;
// lists and maps are replaced as a whole. Validation runs once, after the last layer.
template <class T>
[[nodiscard]] status load_files(const std::vector<std::string>& paths, T& cfg);
// Same, with already-read sources (files and --set overrides).
template <class T>
[[nodiscard]] status load_sources(std::span<const source> layers, T& cfg);
// Bounds, one-of and check() rules on a config built in code ("required" is not checked).
template <class T>
[[nodiscard]] status validate(const T& cfg);
// The effective config as YAML: each key with its doc as a comment, and "default: x" where the
// value differs from the default. Loading the output gives back an equal struct.
template <class T>
[[nodiscard]] std::string to_yaml(const T& cfg);
// Markdown reference: one table per section (key, type, default, description).
template <class T>
[[nodiscard]] std::string to_markdown(std::string_view title);
// Keys whose value differs from the default, as (path, flow YAML), for start-up logs.
template <class T>
[[nodiscard]] std::vector<std::pair<std::string, std::string>> non_defaults(const T& cfg);

// What a daemon's main() does after parse_daemon_args.
struct cli_outcome {
  bool exit = false;  // print `output` to stdout and exit 0 (help, print-config)
  std::string output;
  std::vector<std::string> files;  // config files loaded, in order
};

// The command line every daemon shares: -c/--config FILE (repeatable, later wins),
// --set KEY=VALUE (repeatable, after the files), --print-config, --print-config-docs, -h/--help.
// Loads and validates the config into `cfg`. Errors (bad flag, bad config) are errc::config_error
// with a message ready for stderr.
template <class T>
[[nodiscard]] result<cli_outcome> parse_daemon_args(int argc, const char* const* argv,
                                                    std::string_view daemon_name, T& cfg);

// ---- implementation ------------------------------------------------------------------------

template <class T>
bool binder::decode(const detail::node& n, T& out, const std::string& path) {
  using detail::node;
  if constexpr (detail::is_optional<T>::value) {
    if (n.k == node::kind::null) {
      out.reset();
      return true;
    }
    detail::option_value_t<T> v{};
    if (!decode(n, v, path)) return false;
    out = std::move(v);
    return true;
  } else if constexpr (detail::is_vector<T>::value) {
    if (n.k == node::kind::null) {
      out.clear();
      return true;
    }
    if (n.k != node::kind::sequence) {
      report(n, path, "expected a list, got " + detail::describe_node(n));
      return false;
    }
    T v;
    bool ok = true;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      typename T::value_type x{};
      ok = decode(n.items[i], x, path + "[" + std::to_string(i) + "]") && ok;
      v.push_back(std::move(x));
    }
    if (ok) out = std::move(v);
    return ok;
  } else if constexpr (detail::is_string_map<T>::value) {
    if (n.k == node::kind::null) {
      out.clear();
      return true;
    }
    if (n.k != node::kind::map) {
      report(n, path, "expected a map, got " + detail::describe_node(n));
      return false;
    }
    T v;
    bool ok = true;
    for (const auto& e : n.entries) {
      typename T::mapped_type x{};
      ok = decode(e.value, x, path + "." + e.key) && ok;
      v.emplace(e.key, std::move(x));
    }
    if (ok) out = std::move(v);
    return ok;
  } else {
    std::string why = detail::decode_scalar(n, out);
    if (!why.empty()) report(n, path, why);
    return why.empty();
  }
}

template <class T, class U>
void binder::validate_value(const T& v, const field_options<U>& opts, const std::string& path) {
  if constexpr (detail::is_optional<T>::value) {
    if (v) validate_value(*v, opts, path);
  } else if constexpr (detail::is_vector<T>::value) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      validate_value(v[i], opts, path + "[" + std::to_string(i) + "]");
    }
  } else if constexpr (detail::is_string_map<T>::value) {
    for (const auto& [k, x] : v) validate_value(x, opts, path + "." + k);
  } else {
    std::string why = detail::check_bounds(v, opts);
    if (!why.empty()) report_invalid(path, why);
  }
}

template <class T>
void binder::field(std::string_view key, T& value, std::string_view doc,
                   const field_options<detail::option_value_t<T>>& opts) {
  static_assert(detail::is_field_type<T>,
                "unsupported config field type: use bool, integers, double, std::string, duration, "
                "byte_size, or optional/vector/map<string,...> of those; section() or list() for "
                "structs");
  switch (mode_) {
    case mode::load:
      if (const detail::node* n = take(key)) (void)decode(*n, value, child_path(key));
      break;
    case mode::validate:
      validate_value(value, opts, child_path(key));
      if (opts.required) require(key);
      break;
    case mode::print:
      print_field(key, doc, detail::flow(value), detail::block(value), !opts.required);
      break;
    case mode::defaults:
      record_default(key, detail::flow(value));
      break;
    case mode::diff:
      diff_field(key, detail::flow(value));
      break;
    case mode::docs:
      doc_row(key, detail::type_name<T>(), opts.required ? "required" : detail::flow(value),
              std::string(doc) + detail::describe_options(opts));
      break;
  }
}

template <class T>
void binder::section(std::string_view key, T& value, std::string_view doc) {
  switch (mode_) {
    case mode::load: {
      const detail::node* n = take(key);
      if (n == nullptr || !expect_map(*n, child_path(key))) break;
      binder b = child(key, n);
      describe(b, value);
      b.finish_load();
      break;
    }
    case mode::print: {
      print_begin(key, doc, false, false);
      binder b = child(key, nullptr);
      describe(b, value);
      print_end(false);
      break;
    }
    case mode::docs: {
      binder b = child(key, nullptr);
      b.table_ = doc_table(key, doc, false);
      describe(b, value);
      break;
    }
    default: {
      binder b = child(key, nullptr);
      describe(b, value);
      break;
    }
  }
}

template <class T>
void binder::list(std::string_view key, std::vector<T>& items, std::string_view doc) {
  using detail::node;
  switch (mode_) {
    case mode::load: {
      const node* n = take(key);
      if (n == nullptr) break;
      forget_origins(key);
      if (n->k == node::kind::null) {
        items.clear();
        break;
      }
      if (n->k != node::kind::sequence) {
        report(*n, child_path(key), "expected a list of maps, got " + detail::describe_node(*n));
        break;
      }
      std::vector<T> out;
      for (std::size_t i = 0; i < n->items.size(); ++i) {
        T x{};
        binder b = item(key, i, &n->items[i]);
        if (b.expect_map(n->items[i], b.path_)) {
          describe(b, x);
          b.finish_load();
        }
        out.push_back(std::move(x));
      }
      items = std::move(out);
      break;
    }
    case mode::print:
      print_begin(key, doc, true, items.empty());
      for (std::size_t i = 0; i < items.size(); ++i) {
        print_item_begin();
        binder b = item(key, i, nullptr);
        describe(b, items[i]);
      }
      print_end(true);
      break;
    case mode::docs: {
      // Document the item struct through a default-constructed item: its defaults are the ones
      // a new list entry gets.
      T x{};
      binder b = item(key, 0, nullptr);
      b.table_ = doc_table(key, doc, true);
      describe(b, x);
      break;
    }
    case mode::defaults: {
      T x{};
      binder b = item(key, 0, nullptr);
      describe(b, x);
      break;
    }
    default:
      for (std::size_t i = 0; i < items.size(); ++i) {
        binder b = item(key, i, nullptr);
        describe(b, items[i]);
      }
      break;
  }
}

template <class T>
status load_sources(std::span<const source> layers, T& cfg) {
  T tmp = cfg;
  status st = detail::run_load(layers, [&tmp](binder& b) { describe(b, tmp); });
  if (st) cfg = std::move(tmp);
  return st;
}

template <class T>
status load_string(std::string_view text, std::string_view name, T& cfg) {
  const source s{std::string(name), std::string(text), {}};
  return load_sources(std::span<const source>(&s, 1), cfg);
}

template <class T>
status load_files(const std::vector<std::string>& paths, T& cfg) {
  std::vector<source> layers;
  for (const auto& p : paths) {
    auto text = detail::read_text_file(p);
    if (!text) return fail(text.error());
    layers.push_back(source{p, std::move(*text), {}});
  }
  return load_sources(std::span<const source>(layers), cfg);
}

template <class T>
status load_file(const std::string& path, T& cfg) {
  return load_files(std::vector<std::string>{path}, cfg);
}

template <class T>
status validate(const T& cfg) {
  return detail::run_validate([&cfg](binder& b) { describe(b, const_cast<T&>(cfg)); });
}

template <class T>
std::string to_yaml(const T& cfg) {
  T def{};
  return detail::run_print([&cfg](binder& b) { describe(b, const_cast<T&>(cfg)); },
                           [&def](binder& b) { describe(b, def); });
}

template <class T>
std::string to_markdown(std::string_view title) {
  T def{};
  return detail::run_docs([&def](binder& b) { describe(b, def); }, title);
}

template <class T>
std::vector<std::pair<std::string, std::string>> non_defaults(const T& cfg) {
  T def{};
  return detail::run_diff([&cfg](binder& b) { describe(b, const_cast<T&>(cfg)); },
                          [&def](binder& b) { describe(b, def); });
}

template <class T>
result<cli_outcome> parse_daemon_args(int argc, const char* const* argv,
                                      std::string_view daemon_name, T& cfg) {
  auto req = detail::parse_cli(argc, argv);
  if (!req) return fail(req.error());
  cli_outcome out;
  out.files = req->files;
  if (req->help) {
    out.exit = true;
    out.output = detail::cli_help(daemon_name);
    return out;
  }
  if (req->print_docs) {
    out.exit = true;
    out.output = to_markdown<T>(daemon_name);
    return out;
  }
  std::vector<source> layers;
  for (const auto& p : req->files) {
    auto text = detail::read_text_file(p);
    if (!text) return fail(text.error());
    layers.push_back(source{p, std::move(*text), {}});
  }
  for (auto& s : req->sets) layers.push_back(std::move(s));
  if (auto st = load_sources(std::span<const source>(layers), cfg); !st) return fail(st.error());
  if (req->print_config) {
    out.exit = true;
    std::string header = "# Effective configuration of " + std::string(daemon_name);
    if (!req->files.empty()) {
      header += " from";
      for (const auto& f : req->files) header += " " + f;
    }
    out.output = header + "\n" + to_yaml(cfg);
  }
  return out;
}

}  // namespace shoal::config
