#include "common/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/heartbeat.h"
#include "common/sha256.h"
#include "common/text.h"
#include "common/json_text.h"

namespace shoal::checkpoint {

using nlohmann::json;

namespace {

constexpr std::string_view latest = "latest";
constexpr std::string_view writer_prefix = "node:";

result<std::uint64_t> parse_step(std::string_view s) {
  if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0'))
    return fail(errc::invalid_argument,
                "checkpoint step " + quote_excerpt(s) +
                    " is not a decimal number (no sign, no leading zeros, at most 18 digits)");
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v > max_step)
    return fail(errc::invalid_argument, "checkpoint step " + quote_excerpt(s) + " is not a number");
  return v;
}

bool is_hex40(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

bool valid_job(std::string_view job) { return dataset::valid_name(job); }

std::string key(std::string_view job, std::uint64_t step) {
  return std::string(job) + "@" + std::to_string(step);
}

std::string ref::str() const { return step ? key(job, *step) : job + "@" + std::string(latest); }

result<ref> parse_ref(std::string_view s, bool allow_latest) {
  auto at = s.find('@');
  std::string_view job = s.substr(0, at);
  if (!valid_job(job))
    return fail(errc::invalid_argument, "checkpoint job " + quote_excerpt(job) +
                                            " is not a valid name ([a-z0-9][a-z0-9._-]{0,127})");
  ref r{std::string(job), std::nullopt};
  std::string_view step = at == std::string_view::npos ? latest : s.substr(at + 1);
  if (step == latest) {
    if (!allow_latest)
      return fail(errc::invalid_argument,
                  "checkpoint " + quote_excerpt(s) + " names no step (want <job>@<step>)");
    return r;
  }
  auto n = parse_step(step);
  if (!n) return fail(n.error());
  r.step = *n;
  return r;
}

// ---- manifest

result<dataset::manifest> build_manifest(const std::string& job, std::uint64_t step,
                                         const std::string& writer,
                                         std::vector<dataset::file_entry> files) {
  if (!valid_job(job))
    return fail(errc::invalid_argument, "checkpoint job " + quote_excerpt(job) + " is invalid");
  if (step > max_step) return fail(errc::invalid_argument, "checkpoint step is too large");
  if (!heartbeat::valid_node_name(writer))
    return fail(errc::invalid_argument, "writer node " + quote_excerpt(writer) + " is invalid");
  auto m = dataset::build_manifest(job, std::to_string(step), std::string(writer_prefix) + writer,
                                   std::move(files));
  if (!m) return m;
  // Grouped as datasets are, but each pack holds the files of one rank set only, so a restore of
  // some ranks takes whole groups (files_for_ranks) and no other rank's bytes.
  const dataset::grouping_policy policy;
  m->groups.clear();
  struct open_pack {
    dataset::group g;
    std::set<digest> in;
  };
  std::map<std::vector<std::uint32_t>, open_pack> packs;
  auto close = [&](open_pack& p) {
    if (!p.g.files.empty()) m->groups.push_back(std::move(p.g));
    p = open_pack{};
    p.g.type = dataset::group::kind::pack;
  };
  for (std::uint32_t i = 0; i < m->files.size(); ++i) {
    const auto& f = m->files[i];
    if (f.size == 0) continue;
    if (f.size >= policy.small_file_max) {
      m->groups.push_back({dataset::group::kind::single, {i}, f.size});
      continue;
    }
    auto& p = packs[f.ranks];
    p.g.type = dataset::group::kind::pack;
    p.g.files.push_back(i);
    if (p.in.insert(f.id).second) p.g.bytes += f.size;
    if (p.g.bytes >= policy.pack_target) close(p);
  }
  for (auto& [ranks, p] : packs) close(p);
  return m;
}

result<dataset::manifest> parse_manifest(std::string_view text,
                                         const std::optional<digest>& expected) {
  auto m = dataset::parse_manifest(text, expected);
  if (!m) return fail(m.error().wrap("checkpoint manifest"));
  if (!valid_job(m->name) || !parse_step(m->version))
    return fail(errc::protocol_error, "checkpoint manifest names no job@step (" +
                                          quote_excerpt(m->name + "@" + m->version) + ")");
  if (!m->origin.starts_with(writer_prefix) ||
      !heartbeat::valid_node_name(std::string_view(m->origin).substr(writer_prefix.size())))
    return fail(errc::protocol_error,
                "checkpoint manifest origin " + quote_excerpt(m->origin) + " is not node:<name>");
  return m;
}

std::uint64_t step_of(const dataset::manifest& m) {
  auto s = parse_step(m.version);
  return s ? *s : 0;
}

std::string writer_of(const dataset::manifest& m) {
  return m.origin.starts_with(writer_prefix) ? m.origin.substr(writer_prefix.size()) : m.origin;
}

std::optional<std::uint32_t> rank_of(std::string_view path) {
  std::optional<std::uint32_t> found;
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  auto letter = [&](char c) { return lower(c) >= 'a' && lower(c) <= 'z'; };
  for (std::size_t i = 0; i + 4 <= path.size(); ++i) {
    if (lower(path[i]) != 'r' || lower(path[i + 1]) != 'a' || lower(path[i + 2]) != 'n' ||
        lower(path[i + 3]) != 'k')
      continue;
    if (i > 0 && letter(path[i - 1])) continue;
    std::size_t k = i + 4;
    if (k < path.size() && (path[k] == '_' || path[k] == '-')) ++k;
    std::size_t start = k;
    while (k < path.size() && k - start < 7 && path[k] >= '0' && path[k] <= '9') ++k;
    std::size_t digits = k - start;
    if (digits == 0 || digits > 6) continue;
    std::uint32_t v = 0;
    std::from_chars(path.data() + start, path.data() + k, v);
    if (v < dataset::max_rank) found = v;
  }
  return found;
}

std::vector<std::uint32_t> files_for_ranks(const dataset::manifest& m,
                                           const std::vector<std::uint32_t>& ranks) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    const auto& fr = m.files[i].ranks;
    bool take = ranks.empty() || fr.empty();
    for (std::size_t a = 0, b = 0; !take && a < fr.size() && b < ranks.size();) {
      if (fr[a] == ranks[b])
        take = true;
      else if (fr[a] < ranks[b])
        ++a;
      else
        ++b;
    }
    if (take) out.push_back(i);
  }
  return out;
}

result<std::vector<std::uint32_t>> parse_ranks(std::string_view list) {
  std::vector<std::uint32_t> out;
  while (!list.empty()) {
    auto comma = list.find(',');
    std::string item = trim(list.substr(0, comma));
    std::uint32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc{} || p != item.data() + item.size() ||
        v >= dataset::max_rank)
      return fail(errc::invalid_argument, "rank " + quote_excerpt(item) +
                                              " is not a number below " +
                                              std::to_string(dataset::max_rank));
    out.push_back(v);
    if (out.size() > dataset::max_file_ranks)
      return fail(errc::invalid_argument,
                  "more than " + std::to_string(dataset::max_file_ranks) + " ranks");
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---- registration

std::string encode(const registration& r) {
  json groups = json::array();
  for (const auto& g : r.groups)
    groups.push_back({{"info_hash", g.info_hash}, {"torrent", base64_encode(g.torrent)}});
  return json_text(json{{"manifest", r.manifest}, {"groups", std::move(groups)}});
}

result<decoded_registration> decode_registration(std::string_view text) {
  if (text.size() > max_registration_bytes)
    return fail(errc::too_large, "checkpoint registration is larger than " +
                                     std::to_string(max_registration_bytes) + " bytes");
  if (heartbeat::json_too_deep(text))
    return fail(errc::protocol_error, "checkpoint registration nests too deeply");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::protocol_error, "checkpoint registration is not a JSON object");
  auto m = j.find("manifest");
  auto g = j.find("groups");
  if (m == j.end() || !m->is_string() || g == j.end() || !g->is_array())
    return fail(errc::protocol_error,
                "checkpoint registration needs manifest (a string) and groups");
  decoded_registration out;
  out.reg.manifest = m->get<std::string>();
  auto parsed = parse_manifest(out.reg.manifest);
  if (!parsed) return fail(parsed.error());
  out.manifest = std::move(*parsed);
  out.manifest_digest = sha256_of(out.reg.manifest);
  if (g->size() != out.manifest.groups.size() || g->size() > max_groups)
    return fail(errc::protocol_error, "checkpoint registration has " + std::to_string(g->size()) +
                                          " group torrents for " +
                                          std::to_string(out.manifest.groups.size()) + " groups");
  for (const auto& e : *g) {
    if (!e.is_object() || !e.contains("info_hash") || !e["info_hash"].is_string() ||
        !e.contains("torrent") || !e["torrent"].is_string())
      return fail(errc::protocol_error, "checkpoint group entry needs info_hash and torrent");
    group_torrent t;
    t.info_hash = e["info_hash"].get<std::string>();
    if (!is_hex40(t.info_hash))
      return fail(errc::protocol_error, "checkpoint group info_hash " + quote_excerpt(t.info_hash) +
                                            " is not 40 lower-case hex digits");
    auto tor = base64_decode(e["torrent"].get<std::string>(), max_torrent_bytes, "group torrent");
    if (!tor) return fail(tor.error());
    if (tor->empty()) return fail(errc::protocol_error, "checkpoint group torrent is empty");
    t.torrent = std::move(*tor);
    out.reg.groups.push_back(std::move(t));
  }
  return out;
}

// ---- records

namespace {

json record_json(const record& r) {
  json holders = json::array();
  for (const auto& h : r.holders) holders.push_back({{"node", h.node}, {"bytes", h.bytes}});
  return {{"checkpoint", r.key()},        {"job", r.job},       {"step", r.step},
          {"manifest", r.manifest.str()}, {"bytes", r.bytes},   {"files", r.files},
          {"groups", r.groups},           {"writer", r.writer}, {"published_ms", r.published_ms},
          {"holders", std::move(holders)}};
}

result<record> record_of(const json& j) {
  if (!j.is_object()) return fail(errc::protocol_error, "checkpoint record is not an object");
  record r;
  try {
    r.job = j.at("job").get<std::string>();
    r.step = j.at("step").get<std::uint64_t>();
    if (!valid_job(r.job) || r.step > max_step)
      return fail(errc::protocol_error, "checkpoint record names no valid job@step");
    auto d = digest::parse(j.at("manifest").get<std::string>());
    if (!d) return fail(d.error().wrap("checkpoint record manifest"));
    r.manifest = *d;
    r.bytes = j.at("bytes").get<std::uint64_t>();
    r.files = j.at("files").get<std::uint64_t>();
    r.groups = j.at("groups").get<std::uint32_t>();
    r.writer = j.at("writer").get<std::string>();
    r.published_ms = j.at("published_ms").get<std::int64_t>();
    const auto& hs = j.at("holders");
    if (!hs.is_array() || hs.size() > 100'000)
      return fail(errc::protocol_error, "checkpoint record holders is not a bounded array");
    for (const auto& h : hs) {
      holder x{h.at("node").get<std::string>(), h.at("bytes").get<std::uint64_t>()};
      if (!heartbeat::valid_node_name(x.node))
        return fail(errc::protocol_error, "checkpoint record holder name is invalid");
      r.holders.push_back(std::move(x));
    }
  } catch (const json::exception& e) {
    return fail(errc::protocol_error, std::string("checkpoint record: ") + e.what());
  }
  return r;
}

}  // namespace

std::string encode(const record& r) { return json_text(record_json(r)); }

result<record> decode_record(std::string_view text) {
  if (text.size() > (64u << 20) || heartbeat::json_too_deep(text))
    return fail(errc::protocol_error, "checkpoint record is too large or too deep");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(errc::protocol_error, "checkpoint record is not JSON");
  return record_of(j);
}

std::string encode(const std::vector<record>& rs) {
  json a = json::array();
  for (const auto& r : rs) a.push_back(record_json(r));
  return json_text(json{{"checkpoints", std::move(a)}});
}

result<std::vector<record>> decode_records(std::string_view text) {
  if (text.size() > (256u << 20) || heartbeat::json_too_deep(text))
    return fail(errc::protocol_error, "checkpoint list is too large or too deep");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("checkpoints") ||
      !j["checkpoints"].is_array())
    return fail(errc::protocol_error, "checkpoint list is not {\"checkpoints\": [...]}");
  std::vector<record> out;
  for (const auto& e : j["checkpoints"]) {
    auto r = record_of(e);
    if (!r) return fail(r.error());
    out.push_back(std::move(*r));
  }
  return out;
}

// ---- paths

std::string manifest_target(std::string_view k) {
  return std::string(paths::scheduler) + "/" + std::string(k) + "/manifest";
}

std::string group_target(std::string_view k, std::uint32_t group) {
  return std::string(paths::scheduler) + "/" + std::string(k) + "/groups/" + std::to_string(group);
}

result<scheduler_route> parse_scheduler_path(std::string_view rest) {
  auto slash = rest.find('/');
  auto r = parse_ref(rest.substr(0, slash));
  if (!r) return fail(r.error());
  scheduler_route out{*r};
  if (slash == std::string_view::npos) return out;
  std::string_view tail = rest.substr(slash + 1);
  if (!out.which.step && !tail.empty())
    return fail(errc::invalid_argument, "a checkpoint's manifest and groups need a step");
  if (tail == "manifest") {
    out.what = scheduler_route::kind::manifest;
    return out;
  }
  if (tail.starts_with("groups/")) {
    std::string_view n = tail.substr(7);
    std::uint32_t g = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), g);
    if (n.empty() || ec != std::errc{} || p != n.data() + n.size() || g >= max_groups)
      return fail(errc::invalid_argument, "group " + quote_excerpt(n) + " is not a group number");
    out.what = scheduler_route::kind::group;
    out.group = g;
    return out;
  }
  if (tail.empty()) return out;
  return fail(errc::not_found, "no checkpoint route " + quote_excerpt(tail));
}

}  // namespace shoal::checkpoint
