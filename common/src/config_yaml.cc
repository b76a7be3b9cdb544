// The YAML boundary of configuration: yaml-cpp parses, its exceptions end here, and its tree is
// copied into detail::node with positions, unique keys and bounded size.

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <string_view>

#include "common/config.h"

namespace shoal::config::detail {
namespace {

// Bounds on what a config document may expand to. Aliases share nodes in yaml-cpp, so a small
// file can describe an exponential tree ("billion laughs"); copying counts every node.
constexpr int k_max_depth = 64;
constexpr std::size_t k_max_nodes = 200'000;

std::string at(std::string_view name, const YAML::Mark& m) {
  if (m.is_null()) return std::string(name);
  return std::string(name) + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

class converter {
 public:
  explicit converter(std::string_view name) : name_(name) {}

  // Copies `in` into `out`; `fallback` is the position to use when yaml-cpp has none (null
  // values carry the position of the next token, so they take their key's).
  bool convert(const YAML::Node& in, node& out, int depth, int line, int column) {
    if (++count_ > k_max_nodes) return fail_at(in.Mark(), "document too large (too many nodes)");
    if (depth > k_max_depth) return fail_at(in.Mark(), "document nested too deeply");
    const YAML::Mark m = in.Mark();
    out.line = line;
    out.column = column;
    if (!m.is_null() && !in.IsNull()) {
      out.line = m.line + 1;
      out.column = m.column + 1;
    }
    switch (in.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        out.k = node::kind::null;
        return true;
      case YAML::NodeType::Scalar:
        out.k = node::kind::scalar;
        out.text = in.Scalar();
        out.quoted = in.Tag() != "?";
        return true;
      case YAML::NodeType::Sequence:
        out.k = node::kind::sequence;
        out.items.reserve(in.size());
        for (YAML::const_iterator it = in.begin(); it != in.end(); ++it) {
          const YAML::Node item = *it;
          out.items.emplace_back();
          if (!convert(item, out.items.back(), depth + 1, out.line, out.column)) return false;
        }
        return true;
      case YAML::NodeType::Map: {
        out.k = node::kind::map;
        std::set<std::string> seen;
        for (auto it = in.begin(); it != in.end(); ++it) {
          const YAML::Node key = it->first;
          const YAML::Node value = it->second;
          if (!key.IsScalar()) return fail_at(key.Mark(), "map keys must be plain strings");
          const YAML::Mark km = key.Mark();
          if (!seen.insert(key.Scalar()).second) {
            return fail_at(km, "duplicate key \"" + key.Scalar() + "\"");
          }
          entry e;
          e.key = key.Scalar();
          e.line = km.is_null() ? out.line : km.line + 1;
          e.column = km.is_null() ? out.column : km.column + 1;
          if (!convert(value, e.value, depth + 1, e.line, e.column)) return false;
          out.entries.push_back(std::move(e));
        }
        return true;
      }
    }
    return true;
  }

  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  bool fail_at(const YAML::Mark& m, std::string what) {
    message_ = at(name_, m) + ": " + what;
    return false;
  }

  std::string_view name_;
  std::size_t count_ = 0;
  std::string message_;
};

// yaml-cpp 0.7 accepts a quoted string left open at the end of the input when the input ends
// with a line break (it errors without one). The last quoted scalar of such a document is
// where the quote was opened.
void last_quoted(const node& n, const node*& best) {
  if (n.k == node::kind::scalar && n.quoted &&
      (best == nullptr || n.line > best->line || (n.line == best->line && n.column > best->column))) {
    best = &n;
  }
  for (const auto& i : n.items) last_quoted(i, best);
  for (const auto& e : n.entries) last_quoted(e.value, best);
}

result<std::vector<YAML::Node>> load_all(const std::string& text, std::string_view name) {
  try {
    return YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return fail(errc::config_error, at(name, e.mark) + ": " + e.msg);
  } catch (const std::exception& e) {
    return fail(errc::config_error, std::string(name) + ": " + e.what());
  } catch (...) {
    return fail(errc::config_error, std::string(name) + ": unreadable YAML");
  }
}

}  // namespace

result<node> parse_yaml(std::string_view text, std::string_view name) {
  auto docs = load_all(std::string(text), name);
  if (!docs) return fail(docs.error());
  node out;
  if (docs->size() > 1) {
    return fail(errc::config_error,
                at(name, (*docs)[1].Mark()) +
                    ": a second YAML document starts here; a config file holds one (a stray "
                    "\"---\", or a line indented less than the first key?)");
  }
  if (docs->empty()) return out;
  try {
    converter conv(name);
    if (!conv.convert((*docs)[0], out, 0, 1, 1)) return fail(errc::config_error, conv.message());
  } catch (const std::exception& e) {
    return fail(errc::config_error, std::string(name) + ": " + e.what());
  }
  // See last_quoted(): parse again without the trailing whitespace, which makes yaml-cpp see
  // the unterminated quote.
  std::string_view trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == '\r' ||
                              trimmed.back() == ' ' || trimmed.back() == '\t')) {
    trimmed.remove_suffix(1);
  }
  if (trimmed.size() != text.size() && trimmed.find_first_of("\"'") != std::string_view::npos) {
    auto again = load_all(std::string(trimmed), name);
    if (!again) {
      const node* q = nullptr;
      last_quoted(out, q);
      if (q != nullptr) {
        return fail(errc::config_error, std::string(name) + ":" + std::to_string(q->line) + ":" +
                                            std::to_string(q->column) +
                                            ": unclosed quote: the string runs to the end of "
                                            "the file");
      }
      return fail(again.error());
    }
  }
  return out;
}

}  // namespace shoal::config::detail
