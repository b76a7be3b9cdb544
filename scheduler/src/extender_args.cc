#include <algorithm>
#include <cstring>
#include <set>

#include "common/checkpoint.h"
#include "common/heartbeat.h"
#include "common/oci.h"
#include "common/json_text.h"
#include "extender_json.h"
#include "scheduler/extender.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace detail {

// Appends `s` as a JSON string, byte for byte as dump() writes it. Node names are plain ASCII,
// which is copied as is; anything else (quotes, control bytes, UTF-8) goes through nlohmann.
// Answers list every node (5,000 and more), and building a json value per node cost more than
// the rest of the decision.
void append_json_string(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += json_text(json(std::string(s)));
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

}  // namespace detail

namespace {

using detail::append_json_string;

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A hand scanner for the top level of ExtenderArgs. kube-scheduler sends every node's name in
// NodeNames (5,000 short strings at 5,000 nodes), and building a json value for each cost more
// than the rest of a soft decision. The scanner reads that list itself and hands the Pod's bytes
// (and any other member's, only to check them) to nlohmann. It answers only what it is sure of:
// on anything unusual (an escaped key, a duplicate member, NodeNames not a list, a malformed
// byte) it gives up and the generic parse below answers, with its own errors.
class args_scanner {
 public:
  explicit args_scanner(std::string_view s) : s_(s) {}
  [[nodiscard]] std::size_t remaining() const noexcept { return s_.size() - i_; }
  // The bytes from the cursor on (after whitespace), and a jump over n of them.
  [[nodiscard]] std::string_view rest() {
    ws();
    return s_.substr(i_);
  }
  [[nodiscard]] std::size_t pos() const noexcept { return i_; }
  void skip(std::size_t n) noexcept { i_ = std::min(s_.size(), i_ + n); }
  [[nodiscard]] std::string_view bytes(std::size_t from) const {
    return s_.substr(from, i_ - from);
  }
  [[nodiscard]] bool at_end() {
    ws();
    return i_ == s_.size();
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // The string token at the cursor, quotes included; `plain` when it is printable ASCII with no
  // escape (its bytes are then its value).
  bool string_token(std::string_view& tok, bool& plain) {
    ws();
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    const std::size_t start = i_++;
    plain = true;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        tok = s_.substr(start, i_ - start);
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        plain = false;
        i_ += 2;
        continue;
      }
      if (c >= 0x80) plain = false;
      ++i_;
    }
    return false;
  }
  // The bytes of the value at the cursor (any JSON; whoever reads them checks them).
  bool value_bytes(std::string_view& out) {
    ws();
    const std::size_t start = i_;
    int depth = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        std::string_view tok;
        bool plain = false;
        if (!string_token(tok, plain)) return false;
        if (depth == 0) break;
        continue;
      }
      if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        if (--depth == 0) {
          ++i_;
          break;
        }
      } else if (c == ',' && depth == 0) {
        break;
      }
      ++i_;
    }
    out = s_.substr(start, i_ - start);
    return depth == 0 && !out.empty();
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

// NodeNames' list at the cursor into `names`; false when it is not a list of strings or longer
// than max_nodes.
bool scan_names(args_scanner& sc, std::size_t max_nodes, std::vector<std::string>& names) {
  if (!sc.eat('[')) return false;
  if (sc.eat(']')) return true;
  // Room for every name at once: each takes at least 4 bytes ("a",), so the rest of the body
  // bounds the count (untouched capacity costs no page faults).
  names.reserve(std::min(max_nodes, sc.remaining() / 4 + 1));
  for (;;) {
    std::string_view tok;
    bool plain = false;
    if (!sc.string_token(tok, plain) || names.size() >= max_nodes) return false;
    if (plain) {
      names.emplace_back(tok.substr(1, tok.size() - 2));
    } else {
      auto j = json::parse(tok, nullptr, false);
      if (j.is_discarded() || !j.is_string()) return false;
      names.push_back(j.get<std::string>());
    }
    if (sc.eat(',')) continue;
    return sc.eat(']');
  }
}

// ExtenderArgs in the NodeNames form, or nullopt: then parse_extender_args' generic parse decides.
std::optional<extender_args> scan_extender_args(std::string_view body, std::size_t max_nodes,
                                                names_cache* cache) {
  args_scanner sc(body);
  if (!sc.eat('{') || sc.eat('}')) return std::nullopt;
  extender_args a;
  std::string_view pod;
  bool have_pod = false, have_names = false;
  do {
    std::string_view key;
    bool plain = false;
    if (!sc.string_token(key, plain) || !plain || !sc.eat(':')) return std::nullopt;
    key = key.substr(1, key.size() - 2);
    if (key == "NodeNames") {
      if (have_names) return std::nullopt;
      have_names = true;
      if (cache) {
        // A kept list is the same bytes, so the same names: no need to read them again.
        if (auto hit = cache->match(sc.rest()); hit && hit->names.size() <= max_nodes) {
          sc.skip(hit->raw.size());
          a.listed = std::move(hit);
          continue;
        }
      }
      (void)sc.rest();
      const std::size_t from = sc.pos();
      if (!scan_names(sc, max_nodes, a.names)) return std::nullopt;
      if (cache && a.names.size() >= names_cache::min_names)
        a.listed = cache->add(sc.bytes(from), std::move(a.names));
      continue;
    }
    std::string_view text;
    if (!sc.value_bytes(text)) return std::nullopt;
    // Only these values reach nlohmann's recursive parser, so only they are checked for depth
    // (NodeNames, the bulk of the body, is flat by construction): too deep falls back to the
    // generic parse, which refuses it.
    if (heartbeat::json_too_deep(text)) return std::nullopt;
    if (key == "Pod") {
      if (have_pod) return std::nullopt;
      have_pod = true;
      pod = text;
    } else if (!json::accept(text)) {
      return std::nullopt;
    }
  } while (sc.eat(','));
  if (!sc.eat('}') || !sc.at_end() || !have_names || !have_pod) return std::nullopt;
  auto pj = json::parse(pod, nullptr, false);
  if (pj.is_discarded() || pj.is_null()) return std::nullopt;
  auto p = parse_pod(pj);
  if (!p) return std::nullopt;
  a.pod = std::move(*p);
  a.names_form = true;
  return a;
}

}  // namespace

result<pod_info> parse_pod(const json& pod) {
  if (!pod.is_object()) return fail(errc::invalid_argument, "Pod must be a v1.Pod object");
  pod_info p;
  if (const json* md = member(pod, "metadata")) {
    if (const json* l = member(*md, "labels"); l && l->is_object()) {
      if (auto it = l->find(std::string(label_job)); it != l->end()) {
        if (it->is_string() && checkpoint::valid_job(it->get_ref<const std::string&>()))
          p.job = it->get<std::string>();
        else
          p.warnings.push_back(std::string(label_job) + " must be a job name");
      }
    }
    if (const json* n = member(*md, "name"); n && n->is_string())
      p.name = n->get<std::string>().substr(0, 253);
    if (const json* n = member(*md, "namespace"); n && n->is_string())
      p.ns = n->get<std::string>().substr(0, 253);
    if (const json* a = member(*md, "annotations"); a && a->is_object()) {
      auto get = [&](std::string_view key) -> std::optional<std::string> {
        auto it = a->find(std::string(key));
        if (it == a->end() || !it->is_string()) return std::nullopt;
        return it->get<std::string>();
      };
      if (auto ds = get(annotation_datasets)) {
        std::string_view rest = *ds;
        while (!rest.empty()) {
          auto comma = rest.find(',');
          std::string item = trim(rest.substr(0, comma));
          rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
          if (item.empty()) continue;
          if (!valid_dataset_ref(item)) {
            p.warnings.push_back(std::string(annotation_datasets) + ": \"" + item.substr(0, 100) +
                                 "\" is not name@version");
          } else if (p.datasets.size() < 64) {
            p.datasets.push_back(item);
          }
        }
      }
      if (auto m = get(annotation_placement)) {
        std::string mode = trim(*m);
        if (mode == "soft" || mode == "hard")
          p.mode = mode;
        else
          p.warnings.push_back(std::string(annotation_placement) + " must be soft or hard");
      }
      if (auto t = get(annotation_max_missing)) {
        p.max_missing = parse_threshold(*t);
        if (!p.max_missing)
          p.warnings.push_back(std::string(annotation_max_missing) + " must be like 10% or 2GiB");
      }
    }
  }
  std::set<std::string> seen;
  if (const json* spec = member(pod, "spec")) {
    for (const char* list : {"initContainers", "containers"}) {
      const json* cs = member(*spec, list);
      if (!cs) continue;
      if (!cs->is_array()) {
        p.warnings.push_back(std::string("spec.") + list + " is not a list");
        continue;
      }
      for (const auto& c : *cs) {
        const json* img = member(c, "image");
        if (!img || !img->is_string() || img->get_ref<const std::string&>().empty()) continue;
        const auto& text = img->get_ref<const std::string&>();
        auto ref = oci::parse_image_ref(text);
        if (!ref) {
          p.warnings.push_back(ref.error().message);
          continue;
        }
        if (seen.insert(ref->str()).second && p.images.size() < 64) p.images.push_back(text);
      }
    }
  }
  return p;
}

std::shared_ptr<const listed_names::positions> listed_names::positions_for(
    const node_list& nodes) const {
  std::lock_guard lk(mu_);
  const auto& c = nodes.classes();
  if (!pos_ || !c || pos_->list.owner_before(c) || c.owner_before(pos_->list)) return nullptr;
  return pos_;
}

void listed_names::keep(std::shared_ptr<const positions> p) const {
  std::lock_guard lk(mu_);
  pos_ = std::move(p);
}

std::shared_ptr<const listed_names> names_cache::match(std::string_view rest) const {
  std::lock_guard lk(mu_);
  for (const auto& l : lists_) {
    const auto& raw = l->raw;
    // Lists differ early or in length, so a miss costs little; a hit compares every byte.
    if (raw.size() <= rest.size() && raw.back() == rest[raw.size() - 1] &&
        std::memcmp(raw.data(), rest.data(), raw.size()) == 0)
      return l;
  }
  return nullptr;
}

std::shared_ptr<const listed_names> names_cache::add(std::string_view raw,
                                                     std::vector<std::string> names) {
  auto l = std::make_shared<listed_names>();
  l->raw = std::string(raw);
  l->names = std::move(names);
  l->slot.reserve(l->names.size());
  l->answer.reserve(2 + l->raw.size() + l->names.size() * 24);
  l->answer += '[';
  for (const auto& n : l->names) {
    if (l->answer.size() > 1) l->answer += ',';
    l->answer += R"({"Host":)";
    append_json_string(l->answer, n);
    l->answer += R"(,"Score":)";
    l->slot.push_back(static_cast<std::uint32_t>(l->answer.size()));
    l->answer += " 0}";
  }
  l->answer += ']';
  std::lock_guard lk(mu_);
  lists_.insert(lists_.begin(), l);
  if (lists_.size() > capacity) lists_.pop_back();
  return l;
}

result<extender_args> parse_extender_args(std::string_view body, std::size_t max_nodes,
                                          names_cache* cache) {
  if (auto fast = scan_extender_args(body, max_nodes, cache)) return std::move(*fast);
  if (heartbeat::json_too_deep(body))
    return fail(errc::invalid_argument, "ExtenderArgs nests too deep");
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::invalid_argument, "ExtenderArgs is not a JSON object");
  extender_args a;
  const json* pod = member(j, "Pod");
  if (!pod) return fail(errc::invalid_argument, "ExtenderArgs has no Pod");
  auto p = parse_pod(*pod);
  if (!p) return fail(p.error());
  a.pod = std::move(*p);
  const json* names = member(j, "NodeNames");
  const json* nodes = member(j, "Nodes");
  if (names) {
    if (!names->is_array())
      return fail(errc::invalid_argument, "NodeNames must be a list of strings");
    if (names->size() > max_nodes)
      return fail(errc::too_large,
                  "NodeNames has more than " + std::to_string(max_nodes) + " entries");
    for (const auto& n : *names) {
      if (!n.is_string())
        return fail(errc::invalid_argument, "NodeNames must be a list of strings");
      a.names.push_back(n.get<std::string>());
    }
    a.names_form = true;
  } else if (nodes) {
    if (!nodes->is_object())
      return fail(errc::invalid_argument, "Nodes must be a v1.NodeList object");
    const json* items = member(*nodes, "items");
    a.node_items = json::array();
    if (items) {
      if (!items->is_array()) return fail(errc::invalid_argument, "Nodes.items must be a list");
      if (items->size() > max_nodes)
        return fail(errc::too_large,
                    "Nodes.items has more than " + std::to_string(max_nodes) + " entries");
      std::size_t i = 0;
      for (const auto& n : *items) {
        const json* md = member(n, "metadata");
        const json* name = md ? member(*md, "name") : nullptr;
        if (!name || !name->is_string()) {
          return fail(errc::invalid_argument,
                      "Nodes.items[" + std::to_string(i) + "].metadata.name is missing");
        }
        a.names.push_back(name->get<std::string>());
        a.node_items.push_back(n);
        ++i;
      }
    }
    if (const json* md = member(*nodes, "metadata")) a.node_list_meta = *md;
    a.names_form = false;
  } else {
    return fail(errc::invalid_argument, "ExtenderArgs has neither NodeNames nor Nodes");
  }
  return a;
}

}  // namespace shoal::scheduler
