// The YAML boundary of configuration: yaml-cpp's event parser feeds a builder that produces
// detail::node directly, with positions, unique keys, expanded aliases and bounded size. yaml-cpp
// exceptions end here.
//
// The event API is used rather than YAML::Load/LoadAll for two reasons found by fuzzing
// yaml-cpp 0.7: LoadAll loops without end (until bad_alloc) on a document that starts with a
// stray ',' because the parser returns empty documents without consuming input, and a tree of
// aliases can be exponentially larger than its text. Here the number of documents and of nodes
// is bounded.

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "common/config.h"

namespace shoal::config::detail {
namespace {

// Bounds on what a config document may expand to (aliases copy their anchored node).
constexpr std::size_t k_max_depth = 64;
constexpr std::size_t k_max_nodes = 200'000;

std::string at(std::string_view name, int line, int column) {
  return std::string(name) + ":" + std::to_string(line) + ":" + std::to_string(column);
}

// Thrown by the builder from inside yaml-cpp's parser and caught in parse_document().
struct build_error {
  std::string message;
};

std::size_t count_nodes(const node& n) {
  std::size_t c = 1;
  for (const auto& i : n.items) c += count_nodes(i);
  for (const auto& e : n.entries) c += count_nodes(e.value);
  return c;
}

// Builds one document's node tree from parser events. One per document; one thread.
class builder final : public YAML::EventHandler {
 public:
  explicit builder(std::string_view name) : name_(name) {}

  void OnDocumentStart(const YAML::Mark& m) override {
    start_line_ = m.line + 1;
    start_column_ = m.column + 1;
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& m, YAML::anchor_t anchor) override {
    node n;
    place(n, m);
    add(std::move(n), anchor, true);
  }

  void OnAlias(const YAML::Mark& m, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) fail_at(m, "unknown alias");
    count(count_nodes(it->second), m);  // before copying: the copy may be what is too large
    node copy = it->second;
    place(copy, m);
    add(std::move(copy), YAML::NullAnchor, false);
  }

  void OnScalar(const YAML::Mark& m, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    node n;
    place(n, m);
    n.k = node::kind::scalar;
    n.text = value;
    // "?" is a plain scalar, whose type the schema decides; quoted, block and explicitly tagged
    // scalars are strings.
    n.quoted = tag != "?";
    add(std::move(n), anchor, true);
  }

  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(m, node::kind::sequence, anchor);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(m, node::kind::map, anchor);
  }
  void OnMapEnd() override { close(); }

  [[nodiscard]] bool has_root() const { return has_root_; }
  node& root() { return root_; }
  [[nodiscard]] int start_line() const { return start_line_; }
  [[nodiscard]] int start_column() const { return start_column_; }

 private:
  struct frame {
    node n;
    YAML::anchor_t anchor = YAML::NullAnchor;
    bool has_key = false;
    entry pending;  // map frames: the key waiting for its value
    std::set<std::string> keys;
  };

  [[noreturn]] void fail_at(const YAML::Mark& m, std::string what) const {
    throw build_error{at(name_, m.line + 1, m.column + 1) + ": " + what};
  }

  void count(std::size_t n, const YAML::Mark& m) {
    nodes_ += n;
    if (nodes_ > k_max_nodes) fail_at(m, "document too large (too many nodes; aliases?)");
  }

  void place(node& n, const YAML::Mark& m) const {
    if (m.is_null()) return;
    n.line = m.line + 1;
    n.column = m.column + 1;
  }

  void open(const YAML::Mark& m, node::kind k, YAML::anchor_t anchor) {
    if (stack_.size() >= k_max_depth) fail_at(m, "document nested too deeply");
    count(1, m);
    frame f;
    f.n.k = k;
    place(f.n, m);
    f.anchor = anchor;
    stack_.push_back(std::move(f));
  }

  void close() {
    frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.anchor != YAML::NullAnchor) anchors_[f.anchor] = f.n;
    add(std::move(f.n), YAML::NullAnchor, false);
  }

  void add(node n, YAML::anchor_t anchor, bool counted_here) {
    if (counted_here) {
      YAML::Mark m;
      m.line = n.line - 1;
      m.column = n.column - 1;
      count(1, m);
    }
    if (anchor != YAML::NullAnchor) anchors_[anchor] = n;
    if (stack_.empty()) {
      root_ = std::move(n);
      has_root_ = true;
      return;
    }
    frame& top = stack_.back();
    if (top.n.k == node::kind::sequence) {
      // A null item has no position of its own: it takes its sequence's.
      if (n.k == node::kind::null && n.line == 0) {
        n.line = top.n.line;
        n.column = top.n.column;
      }
      top.n.items.push_back(std::move(n));
      return;
    }
    if (!top.has_key) {
      if (n.k != node::kind::scalar) {
        YAML::Mark m;
        m.line = n.line - 1;
        m.column = n.column - 1;
        fail_at(m, "map keys must be plain strings");
      }
      if (!top.keys.insert(n.text).second) {
        YAML::Mark m;
        m.line = n.line - 1;
        m.column = n.column - 1;
        fail_at(m, "duplicate key \"" + n.text + "\"");
      }
      top.pending = entry{std::move(n.text), {}, n.line, n.column};
      top.has_key = true;
      return;
    }
    // yaml-cpp gives a null value the position of the next token; the key's is the useful one.
    if (n.k == node::kind::null) {
      n.line = top.pending.line;
      n.column = top.pending.column;
    }
    top.pending.value = std::move(n);
    top.n.entries.push_back(std::move(top.pending));
    top.pending = entry{};
    top.has_key = false;
  }

  std::string_view name_;
  std::vector<frame> stack_;
  std::map<YAML::anchor_t, node> anchors_;
  node root_;
  bool has_root_ = false;
  std::size_t nodes_ = 0;
  int start_line_ = 1;
  int start_column_ = 1;
};

// The character at 1-based (line, column) of `text`, for a message about it.
std::string char_at(std::string_view text, int line, int column) {
  std::size_t pos = 0;
  for (int l = 1; l < line && pos != std::string_view::npos; ++l) {
    pos = text.find('\n', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (pos == std::string_view::npos) return {};
  pos += static_cast<std::size_t>(column - 1);
  if (pos >= text.size()) return {};
  return std::string(1, text[pos]);
}

// Parses the one document of `text`. A second document (or a parser that does not advance) is
// an error.
result<node> parse_document(std::string_view text, std::string_view name) {
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    builder first(name);
    if (!parser.HandleNextDocument(first)) return node{};  // no document at all
    builder second(name);
    if (parser.HandleNextDocument(second)) {
      if (second.start_line() == first.start_line() &&
          second.start_column() == first.start_column()) {
        const std::string c = char_at(text, first.start_line(), first.start_column());
        return fail(errc::config_error, at(name, first.start_line(), first.start_column()) +
                                            ": unexpected \"" + c + "\": not valid YAML here");
      }
      return fail(errc::config_error,
                  at(name, second.start_line(), second.start_column()) +
                      ": a second YAML document starts here; a config file holds one (a stray "
                      "\"---\", or a line indented less than the first key?)");
    }
    return first.has_root() ? std::move(first.root()) : node{};
  } catch (const build_error& e) {
    return fail(errc::config_error, e.message);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return fail(errc::config_error, std::string(name) + ": " + e.msg);
    return fail(errc::config_error, at(name, e.mark.line + 1, e.mark.column + 1) + ": " + e.msg);
  } catch (const std::exception& e) {
    return fail(errc::config_error, std::string(name) + ": " + e.what());
  } catch (...) {
    return fail(errc::config_error, std::string(name) + ": unreadable YAML");
  }
}

// yaml-cpp 0.7 accepts a quoted string left open at the end of the input when the input ends
// with a line break (it errors without one). The last quoted scalar of such a document is
// where the quote was opened.
void last_quoted(const node& n, const node*& best) {
  if (n.k == node::kind::scalar && n.quoted &&
      (best == nullptr || n.line > best->line ||
       (n.line == best->line && n.column > best->column))) {
    best = &n;
  }
  for (const auto& i : n.items) last_quoted(i, best);
  for (const auto& e : n.entries) last_quoted(e.value, best);
}

}  // namespace

result<node> parse_yaml(std::string_view text, std::string_view name) {
  auto out = parse_document(text, name);
  if (!out) return out;
  // See last_quoted(): parse again without the trailing whitespace, which makes yaml-cpp see
  // the unterminated quote.
  std::string_view trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == '\r' ||
                              trimmed.back() == ' ' || trimmed.back() == '\t')) {
    trimmed.remove_suffix(1);
  }
  if (trimmed.size() != text.size() && trimmed.find_first_of("\"'") != std::string_view::npos) {
    auto again = parse_document(trimmed, name);
    if (!again) {
      const node* q = nullptr;
      last_quoted(*out, q);
      if (q != nullptr) {
        return fail(errc::config_error, at(name, q->line, q->column) +
                                            ": unclosed quote: the string runs to the end of "
                                            "the file");
      }
      return fail(again.error());
    }
  }
  return out;
}

}  // namespace shoal::config::detail
