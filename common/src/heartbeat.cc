#include "common/heartbeat.h"

#include <nlohmann/json.hpp>

namespace shoal::heartbeat {

using nlohmann::json;

std::string encode(const message& m) {
  json j;
  j["schema"] = m.schema;
  j["node"] = m.node;
  j["labels"] = m.labels;
  j["ip"] = m.ip;
  j["bt_port"] = m.bt_port;
  j["http_port"] = m.http_port;
  j["epoch"] = m.epoch;
  j["seq"] = m.seq;
  j["full"] = m.full;
  json objs = json::array();
  for (const auto& o : m.objects) {
    objs.push_back({{"digest", o.id.str()}, {"info_hash", o.info_hash}, {"size", o.size}, {"kind", o.kind}});
  }
  j["objects"] = std::move(objs);
  json rm = json::array();
  for (const auto& d : m.removed) rm.push_back(d.str());
  j["removed"] = std::move(rm);
  j["cache"] = {{"capacity", m.cache_capacity}, {"used", m.cache_used}};
  j["health"] = m.health;
  return j.dump();
}

namespace {

bool is_hex40(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool valid_node(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

}  // namespace

result<message> decode(std::string_view text) {
  if (text.size() > (256u << 20)) return fail(errc::too_large, "heartbeat larger than 256 MiB");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(errc::invalid_argument, "heartbeat is not a JSON object");
  message m;
  try {
    m.schema = j.value("schema", 0);
    if (m.schema != schema_version) {
      return fail(errc::invalid_argument, "heartbeat schema " + std::to_string(m.schema) + " is not supported (want " +
                                              std::to_string(schema_version) + ")");
    }
    m.node = j.value("node", "");
    if (!valid_node(m.node)) return fail(errc::invalid_argument, "heartbeat node name is missing or invalid");
    if (j.contains("labels")) {
      if (!j["labels"].is_object()) return fail(errc::invalid_argument, "heartbeat labels must be an object");
      for (auto& [k, v] : j["labels"].items()) {
        if (!v.is_string() || k.size() > 128 || v.get<std::string>().size() > 256) {
          return fail(errc::invalid_argument, "heartbeat label " + k.substr(0, 64) + " is invalid");
        }
        m.labels[k] = v.get<std::string>();
      }
    }
    m.ip = j.value("ip", "");
    auto port = j.value("bt_port", 0);
    if (port < 0 || port > 65535) return fail(errc::invalid_argument, "heartbeat bt_port out of range");
    m.bt_port = static_cast<std::uint16_t>(port);
    auto hport = j.value("http_port", 0);
    if (hport < 0 || hport > 65535) return fail(errc::invalid_argument, "heartbeat http_port out of range");
    m.http_port = static_cast<std::uint16_t>(hport);
    m.epoch = j.value("epoch", "");
    m.seq = j.value("seq", std::uint64_t{0});
    m.full = j.value("full", true);
    m.health = j.value("health", "ok");
    if (j.contains("objects")) {
      if (!j["objects"].is_array()) return fail(errc::invalid_argument, "heartbeat objects must be a list");
      std::size_t i = 0;
      for (const auto& o : j["objects"]) {
        if (!o.is_object()) return fail(errc::invalid_argument, "heartbeat objects[" + std::to_string(i) + "] is not an object");
        held_object h;
        auto d = digest::parse(o.value("digest", ""));
        if (!d) return fail(d.error().wrap("heartbeat objects[" + std::to_string(i) + "].digest"));
        h.id = *d;
        h.info_hash = o.value("info_hash", "");
        if (!h.info_hash.empty() && !is_hex40(h.info_hash)) {
          return fail(errc::invalid_argument, "heartbeat objects[" + std::to_string(i) + "].info_hash is not 40 hex");
        }
        h.size = o.value("size", std::uint64_t{0});
        h.kind = o.value("kind", "blob");
        m.objects.push_back(std::move(h));
        ++i;
      }
    }
    if (j.contains("removed")) {
      if (!j["removed"].is_array()) return fail(errc::invalid_argument, "heartbeat removed must be a list");
      for (const auto& r : j["removed"]) {
        auto d = digest::parse(r.is_string() ? r.get<std::string>() : std::string());
        if (!d) return fail(d.error().wrap("heartbeat removed"));
        m.removed.push_back(*d);
      }
    }
    if (j.contains("cache") && j["cache"].is_object()) {
      m.cache_capacity = j["cache"].value("capacity", std::uint64_t{0});
      m.cache_used = j["cache"].value("used", std::uint64_t{0});
    }
  } catch (const json::exception& e) {
    return fail(errc::invalid_argument, std::string("heartbeat field has the wrong type: ") + e.what());
  }
  return m;
}

std::string encode(const reply& r) {
  return json{{"epoch", r.epoch}, {"ack_seq", r.ack_seq}, {"resync", r.resync}}.dump();
}

result<reply> decode_reply(std::string_view text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(errc::protocol_error, "heartbeat reply is not a JSON object");
  reply r;
  try {
    r.epoch = j.value("epoch", "");
    r.ack_seq = j.value("ack_seq", std::uint64_t{0});
    r.resync = j.value("resync", false);
  } catch (const json::exception& e) {
    return fail(errc::protocol_error, std::string("heartbeat reply: ") + e.what());
  }
  return r;
}

}  // namespace shoal::heartbeat
