#include "common/heartbeat.h"

#include "common/checkpoint.h"
#include "common/flat_json.h"
#include "common/json_text.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace shoal::heartbeat {

using nlohmann::json;
using jv = flat_json::value;

namespace {

bool is_hex40(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool printable(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool token(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Reads fields of one JSON object with exact types; the first problem is kept with its path.
class reader {
 public:
  reader(jv obj, std::string path) : j_(obj), path_(std::move(path)) {}

  // The member `key`; none when absent or null.
  [[nodiscard]] jv find(const char* key) const {
    jv v = j_.find(key);
    if (!v || v.is_null()) return {};
    return v;
  }
  [[nodiscard]] std::string where(const char* key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  status str(const char* key, std::string& out, std::size_t max_len) const {
    jv v = find(key);
    if (!v) return {};
    if (!v.is_string()) return fail(errc::invalid_argument, where(key) + " must be a string");
    const auto s = v.as_string();
    if (s.size() > max_len) {
      return fail(errc::invalid_argument,
                  where(key) + " is longer than " + std::to_string(max_len));
    }
    if (!printable(s)) return fail(errc::invalid_argument, where(key) + " has control characters");
    out.assign(s);
    return {};
  }
  status u64(const char* key, std::uint64_t& out, std::uint64_t max) const {
    jv v = find(key);
    if (!v) return {};
    // -0 is an integer too (nlohmann's reading, which this decoder kept).
    if (!v.is_unsigned() && !(v.is_integer() && v.as_i64() >= 0)) {
      return fail(errc::invalid_argument, where(key) + " must be a non-negative integer");
    }
    auto n = v.as_u64();
    if (n > max)
      return fail(errc::invalid_argument,
                  where(key) + " is out of range (max " + std::to_string(max) + ")");
    out = n;
    return {};
  }
  status boolean(const char* key, bool& out) const {
    jv v = find(key);
    if (!v) return {};
    if (!v.is_bool()) return fail(errc::invalid_argument, where(key) + " must be true or false");
    out = v.as_bool();
    return {};
  }
  status array(const char* key, jv& out, std::size_t max_items) const {
    out = find(key);
    if (!out) return {};
    if (!out.is_array()) return fail(errc::invalid_argument, where(key) + " must be a list");
    if (out.size() > max_items) {
      return fail(errc::too_large,
                  where(key) + " has more than " + std::to_string(max_items) + " entries");
    }
    return {};
  }

 private:
  jv j_;
  std::string path_;
};

#define SHOAL_TRY(expr)                                 \
  do {                                                  \
    if (auto s_ = (expr); !s_) return fail(s_.error()); \
  } while (0)

// A document carried inside the heartbeat, kept as the JSON text it came in: the message parsed
// (flat_json checked every byte of it, json_too_deep its nesting), and encode() writes a node's
// document as nlohmann's dump, so the same document from a node gives the same text. Parsing
// and dumping it again here cost some 0.45 ms per heartbeat for an 8-NIC node's 22 KB document,
// twenty times the rest of the message (scheduler_bench, netsetup part).
status parse_document(const reader& r, const char* key, bool object_only, std::string& out) {
  jv it = r.find(key);
  if (!it) return {};
  if (!it.is_object() && (object_only || !it.is_array())) {
    return fail(
        errc::invalid_argument,
        r.where(key) + (object_only ? " must be an object" : " must be an object or a list"));
  }
  out.assign(it.source());
  if (out.size() > max_document_bytes) {
    return fail(errc::too_large,
                r.where(key) + " is larger than " + std::to_string(max_document_bytes) + " bytes");
  }
  return {};
}

result<held_object> parse_object(jv o, const std::string& path) {
  if (!o.is_object()) return fail(errc::invalid_argument, path + " is not an object");
  reader r(o, path);
  held_object h;
  std::string d;
  SHOAL_TRY(r.str("digest", d, 128));
  auto dg = digest::parse(d);
  if (!dg) return fail(dg.error().wrap(path + ".digest"));
  h.id = *dg;
  SHOAL_TRY(r.str("info_hash", h.info_hash, 40));
  if (!h.info_hash.empty() && !is_hex40(h.info_hash)) {
    return fail(errc::invalid_argument, path + ".info_hash is not 40 lower-case hex characters");
  }
  SHOAL_TRY(r.u64("size", h.size, max_object_size));
  SHOAL_TRY(r.str("kind", h.kind, 32));
  if (!token(h.kind, 32))
    return fail(errc::invalid_argument, path + ".kind must be a lower-case token");
  return h;
}

result<order_report> parse_report(jv o, const std::string& path) {
  if (!o.is_object()) return fail(errc::invalid_argument, path + " is not an object");
  reader r(o, path);
  order_report rep;
  SHOAL_TRY(r.str("id", rep.id, 128));
  if (!valid_order_id(rep.id))
    return fail(errc::invalid_argument, path + ".id is missing or invalid");
  std::string st;
  SHOAL_TRY(r.str("state", st, 16));
  if (st == "queued")
    rep.state = order_state::queued;
  else if (st == "running")
    rep.state = order_state::running;
  else if (st == "done")
    rep.state = order_state::done;
  else if (st == "failed")
    rep.state = order_state::failed;
  else
    return fail(errc::invalid_argument, path + ".state must be queued, running, done or failed");
  SHOAL_TRY(r.u64("bytes_done", rep.bytes_done, max_object_size * 1024));
  SHOAL_TRY(r.u64("bytes_total", rep.bytes_total, max_object_size * 1024));
  SHOAL_TRY(r.str("error", rep.error, 4096));
  return rep;
}

result<prewarm_order> parse_order(jv o, const std::string& path) {
  if (!o.is_object()) return fail(errc::invalid_argument, path + " is not an object");
  reader r(o, path);
  prewarm_order ord;
  SHOAL_TRY(r.str("id", ord.id, 128));
  if (!valid_order_id(ord.id))
    return fail(errc::invalid_argument, path + ".id is missing or invalid");
  SHOAL_TRY(r.str("image", ord.image, 1024));
  SHOAL_TRY(r.str("dataset", ord.dataset, 512));
  SHOAL_TRY(r.str("checkpoint", ord.checkpoint, 512));
  if (int(!ord.image.empty()) + int(!ord.dataset.empty()) + int(!ord.checkpoint.empty()) != 1) {
    return fail(errc::invalid_argument,
                path + " needs exactly one of image, dataset and checkpoint");
  }
  SHOAL_TRY(r.str("platform", ord.platform, 64));
  SHOAL_TRY(r.str("registry", ord.registry, 255));
  SHOAL_TRY(r.str("repository", ord.repository, 255));
  SHOAL_TRY(r.u64("pin_seconds", ord.pin_seconds, 365ull * 24 * 3600));
  jv objs;
  SHOAL_TRY(r.array("objects", objs, max_order_objects));
  if (objs) {
    std::size_t i = 0;
    for (jv x : objs.elements()) {
      std::string p = path + ".objects[" + std::to_string(i++) + "]";
      if (!x.is_object()) return fail(errc::invalid_argument, p + " is not an object");
      reader xr(x, p);
      std::string d;
      SHOAL_TRY(xr.str("digest", d, 128));
      auto dg = digest::parse(d);
      if (!dg) return fail(dg.error().wrap(p + ".digest"));
      order_object oo;
      oo.id = *dg;
      SHOAL_TRY(xr.u64("size", oo.size, max_object_size));
      ord.objects.push_back(oo);
    }
  }
  return ord;
}

}  // namespace

std::string_view to_string(order_state s) noexcept {
  switch (s) {
    case order_state::queued:
      return "queued";
    case order_state::running:
      return "running";
    case order_state::done:
      return "done";
    case order_state::failed:
      return "failed";
  }
  return "unknown";
}

bool valid_node_name(std::string_view s) noexcept {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return true;
}

bool valid_label_key(std::string_view s) noexcept {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/'))
      return false;
  }
  return true;
}

bool valid_order_id(std::string_view s) noexcept {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == ':'))
      return false;
  }
  return true;
}

bool json_too_deep(std::string_view text, int limit) noexcept {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

namespace {

// A JSON text written directly (a message can hold a node's whole list: 100,000 objects): byte
// for byte what dump() of the same document built as nlohmann::json gives (keys sorted, no
// spaces, strings escaped alike, invalid UTF-8 replaced); tests/common compares the two.
class writer {
 public:
  explicit writer(std::size_t reserve) { out_.reserve(reserve); }
  writer& raw(std::string_view s) {
    out_.append(s);
    return *this;
  }
  writer& raw(char c) {
    out_.push_back(c);
    return *this;
  }
  writer& str(std::string_view s) {
    for (unsigned char c : s) {
      // Escapes and UTF-8 checks: nlohmann's own (rare in a heartbeat).
      if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
        return raw(json_text(json(std::string(s))));
    }
    out_.push_back('"');
    out_.append(s);
    out_.push_back('"');
    return *this;
  }
  template <typename N>
  writer& num(N v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, end);
    return *this;
  }
  writer& boolean(bool b) { return raw(b ? "true" : "false"); }
  // `"key":`, after a comma unless it opens the object.
  writer& key(std::string_view k, bool opens = false) {
    if (!opens) out_.push_back(',');
    str(k);
    out_.push_back(':');
    return *this;
  }
  template <typename T, typename F>
  writer& array(const std::vector<T>& list, F&& each) {
    out_.push_back('[');
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i != 0) out_.push_back(',');
      each(list[i]);
    }
    out_.push_back(']');
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string encode(const message& m) { return encode(m, encode_parts{}); }

std::string encode(const message& m, const encode_parts& parts) {
  static const std::vector<held_object> no_objects;
  static const std::vector<digest> no_digests;
  const auto& objects = parts.holdings ? m.objects : no_objects;
  const auto& removed = parts.holdings ? m.removed : no_digests;
  writer w(512 + objects.size() * 170 + removed.size() * 80 + m.rdma.size() +
           (parts.netsetup ? m.netsetup.size() : 0));
  // Documents travel as JSON values, not strings; an unparsable one is dropped (never sent).
  auto document = [&](const char* key, const std::string& text) {
    if (text.empty()) return;
    auto doc = json::parse(text, nullptr, false);
    if (!doc.is_discarded()) w.key(key).raw(json_text(doc));
  };
  // Datasets and checkpoints held here: the same fields (absent when none).
  auto presence = [&](const char* key, const std::vector<dataset_presence>& list) {
    if (list.empty()) return;
    w.key(key).array(list, [&](const dataset_presence& d) {
      w.raw('{').key("bytes", true).num(d.bytes).key("dataset").str(d.dataset);
      w.key("total").num(d.total).key("view").boolean(d.view).raw('}');
    });
  };
  // Keys in sorted order (as nlohmann::json's std::map gives them).
  w.raw('{').key("bt_port", true).num(m.bt_port);
  w.key("cache").raw('{').key("capacity", true).num(m.cache_capacity);
  w.key("used").num(m.cache_used).raw('}');
  presence("checkpoints", m.checkpoints);
  presence("datasets", m.datasets);
  w.key("epoch").str(m.epoch).key("full").boolean(m.full);
  w.key("gpus").array(m.gpus, [&](const gpu_group& g) {
    w.raw('{').key("count", true).num(g.count).key("model").str(g.model).raw('}');
  });
  w.key("health").str(m.health);
  w.key("health_reasons").array(m.health_reasons, [&](const std::string& r) { w.str(r); });
  w.key("http_port").num(m.http_port).key("ip").str(m.ip);
  w.key("labels").raw('{');
  bool opens = true;
  for (const auto& [k, v] : m.labels) {
    w.key(k, opens).str(v);
    opens = false;
  }
  w.raw('}');
  if (m.leaving) w.key("leaving").boolean(true);
  if (parts.netsetup) {
    document("netsetup", m.netsetup);
    if (m.netsetup_unchanged) w.key("netsetup_unchanged").boolean(true);
  }
  w.key("node").str(m.node);
  w.key("objects").array(objects, [&](const held_object& o) {
    w.raw('{').key("digest", true).str(o.id.str()).key("info_hash").str(o.info_hash);
    w.key("kind").str(o.kind).key("size").num(o.size).raw('}');
  });
  w.key("orders").array(m.orders, [&](const order_report& o) {
    w.raw('{').key("bytes_done", true).num(o.bytes_done).key("bytes_total").num(o.bytes_total);
    if (!o.error.empty()) w.key("error").str(o.error);
    w.key("id").str(o.id).key("state").str(to_string(o.state)).raw('}');
  });
  if (m.pods_known) {
    w.key("pods").array(m.pods, [&](const job_pod& p) {
      w.raw('{').key("job", true).str(p.job).key("pod").str(p.pod).raw('}');
    });
  }
  document("rdma", m.rdma);
  w.key("removed").array(removed, [&](const digest& d) { w.str(d.str()); });
  w.key("schema").num(m.schema).key("seq").num(m.seq).raw('}');
  return w.take();
}

namespace {

// Runs `each(element, path)` on every element of the optional array `key` (at most `max`).
template <typename F>
status for_each_in(const reader& r, const char* key, std::size_t max, F&& each) {
  jv arr;
  SHOAL_TRY(r.array(key, arr, max));
  if (!arr) return {};
  std::size_t i = 0;
  for (jv x : arr.elements())
    SHOAL_TRY(each(x, std::string(key) + "[" + std::to_string(i++) + "]"));
  return {};
}

// Parses every element of the optional array `key` with `parse(element, path)` into `out`.
template <typename T, typename Parse>
status collect(const reader& r, const char* key, std::size_t max, Parse&& parse,
               std::vector<T>& out) {
  return for_each_in(r, key, max, [&](jv x, const std::string& p) -> status {
    auto v = parse(x, p);
    if (!v) return fail(v.error());
    out.push_back(std::move(*v));
    return {};
  });
}

// schema, node, labels, addresses and the sequence fields.
status decode_identity(const reader& r, message& m) {
  std::uint64_t schema = 0;
  SHOAL_TRY(r.u64("schema", schema, 1000));
  if (schema < static_cast<std::uint64_t>(min_schema_version) ||
      schema > static_cast<std::uint64_t>(schema_version)) {
    return fail(errc::invalid_argument, "heartbeat schema " + std::to_string(schema) +
                                            " is not supported (want " +
                                            std::to_string(min_schema_version) + ".." +
                                            std::to_string(schema_version) + ")");
  }
  m.schema = static_cast<int>(schema);
  SHOAL_TRY(r.str("node", m.node, 253));
  if (!valid_node_name(m.node))
    return fail(errc::invalid_argument, "heartbeat node name is missing or invalid");
  if (jv labels = r.find("labels")) {
    if (!labels.is_object()) return fail(errc::invalid_argument, "labels must be an object");
    if (labels.size() > max_labels)
      return fail(errc::too_large,
                  "labels has more than " + std::to_string(max_labels) + " entries");
    for (auto [key, v] : labels.members()) {
      std::string k(key);
      if (!valid_label_key(k))
        return fail(errc::invalid_argument,
                    "label key \"" + json_text(json(k.substr(0, 64))) + "\" is invalid");
      if (!v.is_string() || v.as_string().size() > 256 || !printable(v.as_string())) {
        return fail(errc::invalid_argument,
                    "labels." + k + " must be a printable string of at most 256 bytes");
      }
      if (m.labels.count(k)) return fail(errc::invalid_argument, "labels." + k + " is given twice");
      m.labels.emplace(std::move(k), v.as_string());
    }
  }
  SHOAL_TRY(r.str("ip", m.ip, 64));
  if (!m.ip.empty()) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, m.ip.c_str(), buf) != 1 && inet_pton(AF_INET6, m.ip.c_str(), buf) != 1) {
      return fail(errc::invalid_argument, "ip is not an IPv4 or IPv6 address");
    }
  }
  std::uint64_t port = 0;
  SHOAL_TRY(r.u64("bt_port", port, 65535));
  m.bt_port = static_cast<std::uint16_t>(port);
  port = 0;
  SHOAL_TRY(r.u64("http_port", port, 65535));
  m.http_port = static_cast<std::uint16_t>(port);
  SHOAL_TRY(r.str("epoch", m.epoch, 64));
  SHOAL_TRY(r.u64("seq", m.seq, std::uint64_t{1} << 62));
  SHOAL_TRY(r.boolean("full", m.full));
  SHOAL_TRY(r.boolean("leaving", m.leaving));
  if (m.schema < 2 && !m.full)
    return fail(errc::invalid_argument, "schema 1 heartbeats carry full lists only");
  return {};
}

// What the node's cache holds: objects, removals (deltas only) and the cache's size.
status decode_holdings(const reader& r, message& m, std::size_t limit) {
  jv objects, removed;
  SHOAL_TRY(r.array("objects", objects, limit));
  SHOAL_TRY(r.array("removed", removed, limit));
  std::size_t listed = objects.size() + removed.size();
  if (listed > limit) {
    return fail(errc::too_large, "objects and removed list " + std::to_string(listed) +
                                     " entries together, more than " + std::to_string(limit));
  }
  m.objects.reserve(objects.size());
  SHOAL_TRY(collect(r, "objects", limit, parse_object, m.objects));
  if (removed && m.full && removed.size() != 0)
    return fail(errc::invalid_argument, "removed must be empty in a full heartbeat");
  m.removed.reserve(removed.size());
  SHOAL_TRY(for_each_in(r, "removed", limit, [&](jv x, const std::string& p) -> status {
    if (!x.is_string()) return fail(errc::invalid_argument, p + " must be a digest string");
    auto d = digest::parse(x.as_string());
    if (!d) return fail(d.error().wrap(p));
    m.removed.push_back(*d);
    return {};
  }));
  if (jv cache = r.find("cache")) {
    if (!cache.is_object()) return fail(errc::invalid_argument, "cache must be an object");
    reader cr(cache, "cache");
    SHOAL_TRY(cr.u64("capacity", m.cache_capacity, max_object_size * 1024));
    SHOAL_TRY(cr.u64("used", m.cache_used, max_object_size * 1024));
  }
  return {};
}

// The node's hardware and health: GPUs, the RDMA and netsetup documents, health and reasons.
status decode_inventory(const reader& r, message& m) {
  SHOAL_TRY(for_each_in(r, "gpus", max_gpu_groups, [&](jv g, const std::string& p) -> status {
    if (!g.is_object()) return fail(errc::invalid_argument, p + " is not an object");
    reader gr(g, p);
    gpu_group grp;
    SHOAL_TRY(gr.str("model", grp.model, 128));
    std::uint64_t n = 0;
    SHOAL_TRY(gr.u64("count", n, max_gpus_per_group));
    grp.count = static_cast<std::uint32_t>(n);
    m.gpus.push_back(std::move(grp));
    return {};
  }));
  SHOAL_TRY(parse_document(r, "rdma", false, m.rdma));
  SHOAL_TRY(parse_document(r, "netsetup", true, m.netsetup));
  SHOAL_TRY(r.boolean("netsetup_unchanged", m.netsetup_unchanged));
  if (m.netsetup_unchanged && m.full)
    return fail(errc::invalid_argument, "netsetup_unchanged in a full heartbeat");
  if (m.netsetup_unchanged && !m.netsetup.empty())
    return fail(errc::invalid_argument, "netsetup_unchanged beside a netsetup document");
  SHOAL_TRY(r.str("health", m.health, 16));
  if (m.health != "ok" && m.health != "degraded" && m.health != "failing") {
    return fail(errc::invalid_argument, "health must be ok, degraded or failing");
  }
  return for_each_in(r, "health_reasons", 32, [&](jv x, const std::string&) -> status {
    if (!x.is_string() || x.as_string().size() > 512) {
      return fail(errc::invalid_argument,
                  "health_reasons entries must be strings of at most 512 bytes");
    }
    m.health_reasons.emplace_back(x.as_string());
    return {};
  });
}

// One entry of "datasets": a dataset the node holds (part of), and whether its view exists.
result<dataset_presence> parse_dataset_presence(jv x, const std::string& p) {
  if (!x.is_object()) return fail(errc::invalid_argument, p + " is not an object");
  reader dr(x, p);
  dataset_presence d;
  SHOAL_TRY(dr.str("dataset", d.dataset, 330));
  auto at = d.dataset.find('@');
  if (at == std::string::npos || at == 0 || at + 1 == d.dataset.size()) {
    return fail(errc::invalid_argument, p + ".dataset must be name@version");
  }
  SHOAL_TRY(dr.u64("bytes", d.bytes, max_object_size * 1024));
  SHOAL_TRY(dr.u64("total", d.total, max_object_size * 1024));
  if (d.bytes > d.total) return fail(errc::invalid_argument, p + ".bytes is larger than its total");
  if (jv v = x.find("view")) {
    if (!v.is_bool()) return fail(errc::invalid_argument, p + ".view must be a boolean");
    d.view = v.as_bool();
  }
  return d;
}

// One entry of "checkpoints": the same fields, the name a checkpoint's "<job>@<step>".
result<dataset_presence> parse_checkpoint_presence(jv x, const std::string& p) {
  auto d = parse_dataset_presence(x, p);
  if (d && !checkpoint::parse_ref(d->dataset, false))
    return fail(errc::invalid_argument, p + ".dataset must be <job>@<step>");
  return d;
}

// One entry of "pods".
result<job_pod> parse_pod(jv x, const std::string& p) {
  if (!x.is_object()) return fail(errc::invalid_argument, p + " is not an object");
  reader pr(x, p);
  job_pod out;
  SHOAL_TRY(pr.str("job", out.job, 256));
  SHOAL_TRY(pr.str("pod", out.pod, max_pod_name_bytes));
  if (!checkpoint::valid_job(out.job))
    return fail(errc::invalid_argument, p + ".job is not a valid job name");
  if (out.pod.empty()) return fail(errc::invalid_argument, p + ".pod is missing");
  return out;
}

// What the node reports back: prewarm order progress and dataset presence.
status decode_reports(const reader& r, message& m) {
  if (r.find("pods")) {
    m.pods_known = true;
    SHOAL_TRY(collect(r, "pods", max_pods, parse_pod, m.pods));
  }
  SHOAL_TRY(collect(r, "orders", max_orders, parse_report, m.orders));
  SHOAL_TRY(collect(r, "datasets", max_datasets, parse_dataset_presence, m.datasets));
  return collect(r, "checkpoints", max_checkpoints, parse_checkpoint_presence, m.checkpoints);
}

}  // namespace

result<message> decode(std::string_view text, const decode_limits& limits) {
  const std::size_t max_listed = std::min(limits.max_objects, max_objects);
  const std::size_t max_bytes = std::min(max_message_bytes_for(max_listed), max_message_bytes);
  if (text.size() > max_bytes) {
    return fail(errc::too_large, "heartbeat of " + std::to_string(text.size()) +
                                     " bytes is larger than " + std::to_string(max_bytes) +
                                     " (the most a node with " + std::to_string(max_listed) +
                                     " objects sends)");
  }
  if (json_too_deep(text))
    return fail(errc::invalid_argument,
                "heartbeat nests deeper than " + std::to_string(max_json_depth));
  auto doc = flat_json::parse(text);
  if (!doc)
    return fail(errc::invalid_argument,
                "heartbeat is not a JSON object (" + doc.error().message + ")");
  if (!doc->root().is_object())
    return fail(errc::invalid_argument, "heartbeat is not a JSON object");
  message m;
  reader r(doc->root(), "");
  SHOAL_TRY(decode_identity(r, m));
  SHOAL_TRY(decode_holdings(r, m, max_listed));
  SHOAL_TRY(decode_inventory(r, m));
  SHOAL_TRY(decode_reports(r, m));
  return m;
}

std::string encode(const reply& r) {
  json j = {{"schema", r.schema}, {"epoch", r.epoch}, {"ack_seq", r.ack_seq}, {"resync", r.resync}};
  if (r.keeps_netsetup) j["keeps_netsetup"] = true;
  json orders = json::array();
  for (const auto& o : r.orders) {
    json x = {{"id", o.id},
              {"platform", o.platform},
              {"registry", o.registry},
              {"repository", o.repository},
              {"pin_seconds", o.pin_seconds}};
    if (!o.image.empty()) x["image"] = o.image;
    if (!o.dataset.empty()) x["dataset"] = o.dataset;
    if (!o.checkpoint.empty()) x["checkpoint"] = o.checkpoint;
    json objs = json::array();
    for (const auto& ob : o.objects) objs.push_back({{"digest", ob.id.str()}, {"size", ob.size}});
    x["objects"] = std::move(objs);
    orders.push_back(std::move(x));
  }
  j["orders"] = std::move(orders);
  return json_text(j);
}

result<reply> decode_reply(std::string_view text) {
  if (text.size() > (64u << 20)) return fail(errc::too_large, "heartbeat reply larger than 64 MiB");
  if (json_too_deep(text)) return fail(errc::protocol_error, "heartbeat reply nests too deep");
  auto doc = flat_json::parse(text);
  if (!doc || !doc->root().is_object())
    return fail(errc::protocol_error, "heartbeat reply is not a JSON object");
  reply rep;
  reader r(doc->root(), "reply");
  auto wrap = [](const error& e) { return error(errc::protocol_error, e.message); };
  std::uint64_t schema = 1;
  if (auto s = r.u64("schema", schema, 1000); !s) return fail(wrap(s.error()));
  rep.schema = static_cast<int>(schema);
  if (auto s = r.str("epoch", rep.epoch, 64); !s) return fail(wrap(s.error()));
  if (auto s = r.u64("ack_seq", rep.ack_seq, std::uint64_t{1} << 62); !s)
    return fail(wrap(s.error()));
  if (auto s = r.boolean("resync", rep.resync); !s) return fail(wrap(s.error()));
  if (auto s = r.boolean("keeps_netsetup", rep.keeps_netsetup); !s) return fail(wrap(s.error()));
  jv orders;
  if (auto s = r.array("orders", orders, max_orders); !s) return fail(wrap(s.error()));
  if (orders) {
    std::size_t i = 0;
    for (jv o : orders.elements()) {
      auto ord = parse_order(o, "reply.orders[" + std::to_string(i++) + "]");
      if (!ord) return fail(wrap(ord.error()));
      rep.orders.push_back(std::move(*ord));
    }
  }
  return rep;
}

}  // namespace shoal::heartbeat
