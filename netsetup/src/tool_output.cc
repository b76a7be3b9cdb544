#include "netsetup/tool_output.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "netsetup/errc.h"
#include "netsetup/sysfs.h"
#include "common/json_text.h"

namespace shoal::netsetup {
namespace {

using json = nlohmann::json;

// Tool output beyond this size is not what dcb prints for one device.
constexpr std::size_t max_output = 256 * 1024;

std::unexpected<error> bad(std::string_view what, std::string why) {
  return fail(make_error_code(errc::command_output), std::string(what) + ": " + why);
}

result<json> parse_object(std::string_view text, std::string_view what) {
  if (text.size() > max_output) return bad(what, "output larger than 256 KiB");
  // The non-throwing parse: a syntax error gives a discarded value.
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return bad(what, "not JSON: " + quote_excerpt(text));
  if (!j.is_object()) return bad(what, "expected a JSON object, got " + quote_excerpt(text));
  return j;
}

bool get_int(const json& j, int lo, int hi, int& out) {
  if (!j.is_number_integer() && !j.is_number_unsigned()) return false;
  if (j.is_number_unsigned()) {
    auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(hi)) return false;
    out = static_cast<int>(v);
    return out >= lo;
  }
  auto v = j.get<std::int64_t>();
  if (v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

template <class F>
std::string check_array8(const json& j, std::string_view key, F&& each) {
  auto it = j.find(key);
  if (it == j.end()) return "missing \"" + std::string(key) + "\"";
  if (!it->is_array() || it->size() != 8) {
    return "\"" + std::string(key) + "\" is not an array of 8";
  }
  for (std::size_t i = 0; i < 8; ++i) {
    if (!each(i, (*it)[i])) {
      return "\"" + std::string(key) + "\"[" + std::to_string(i) + "] has the wrong type";
    }
  }
  return {};
}

}  // namespace

result<dcb_pfc> parse_dcb_pfc(std::string_view text, std::string_view what) {
  auto j = parse_object(text, what);
  if (!j) return fail(j.error());
  dcb_pfc p;
  std::string why = check_array8(*j, "prio_pfc", [&](std::size_t i, const json& v) {
    if (!v.is_boolean()) return false;
    p.enabled[i] = v.get<bool>();
    return true;
  });
  if (!why.empty()) return bad(what, why);
  if (auto it = j->find("pfc_cap"); it != j->end() && !get_int(*it, 0, 255, p.pfc_cap)) {
    return bad(what, "\"pfc_cap\" is not a small integer");
  }
  if (auto it = j->find("delay"); it != j->end() && !get_int(*it, 0, 65535, p.delay)) {
    return bad(what, "\"delay\" is not an integer 0..65535");
  }
  if (auto it = j->find("macsec_bypass"); it != j->end()) {
    if (!it->is_boolean()) return bad(what, "\"macsec_bypass\" is not a boolean");
    p.macsec_bypass = it->get<bool>();
  }
  return p;
}

result<dcb_app> parse_dcb_app(std::string_view text, std::string_view what) {
  auto j = parse_object(text, what);
  if (!j) return fail(j.error());
  dcb_app a;
  if (auto it = j->find("dscp_prio"); it != j->end()) {
    if (!it->is_array()) return bad(what, "\"dscp_prio\" is not an array");
    if (it->size() > 64 * 8) return bad(what, "\"dscp_prio\" has too many entries");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& e = (*it)[i];
      int dscp = 0, prio = 0;
      if (!e.is_array() || e.size() != 2 || !get_int(e[0], 0, 63, dscp) ||
          !get_int(e[1], 0, 7, prio)) {
        return bad(what, "\"dscp_prio\"[" + std::to_string(i) + "] is not [dscp 0..63, prio 0..7]");
      }
      a.dscp_prio.emplace_back(dscp, prio);
    }
  }
  if (auto it = j->find("default_prio"); it != j->end()) {
    if (!it->is_array() || it->size() > 8) return bad(what, "\"default_prio\" is not an array");
    for (const auto& e : *it) {
      int prio = 0;
      if (!get_int(e, 0, 7, prio)) return bad(what, "\"default_prio\" has a bad priority");
      a.default_prio.push_back(prio);
    }
  }
  std::sort(a.dscp_prio.begin(), a.dscp_prio.end());
  return a;
}

result<dcb_ets> parse_dcb_ets(std::string_view text, std::string_view what) {
  auto j = parse_object(text, what);
  if (!j) return fail(j.error());
  dcb_ets e;
  std::string why = check_array8(
      *j, "prio_tc", [&](std::size_t i, const json& v) { return get_int(v, 0, 7, e.prio_tc[i]); });
  if (why.empty()) {
    why = check_array8(
        *j, "tc_bw", [&](std::size_t i, const json& v) { return get_int(v, 0, 100, e.tc_bw[i]); });
  }
  if (why.empty()) {
    why = check_array8(*j, "tc_tsa", [&](std::size_t i, const json& v) {
      if (!v.is_string()) return false;
      e.tc_tsa[i] = v.get<std::string>();
      return e.tc_tsa[i].size() < 16;
    });
  }
  if (!why.empty()) return bad(what, why);
  if (auto it = j->find("willing"); it != j->end()) {
    if (!it->is_boolean()) return bad(what, "\"willing\" is not a boolean");
    e.willing = it->get<bool>();
  }
  return e;
}

result<std::vector<std::string>> parse_dcb_apptrust(std::string_view text, std::string_view what) {
  auto j = parse_object(text, what);
  if (!j) return fail(j.error());
  auto it = j->find("order");
  if (it == j->end() || !it->is_array() || it->size() > 8) {
    return bad(what, "missing \"order\" array");
  }
  std::vector<std::string> order;
  for (const auto& v : *it) {
    if (!v.is_string() || v.get_ref<const std::string&>().size() > 16) {
      return bad(what, "\"order\" holds a non-selector");
    }
    order.push_back(v.get<std::string>());
  }
  return order;
}

result<pause_state> parse_ethtool_pause(std::string_view text, std::string_view what) {
  if (text.size() > max_output) return bad(what, "output larger than 256 KiB");
  pause_state p;
  bool have_rx = false, have_tx = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    std::string_view val = line.substr(colon + 1);
    while (!val.empty() && (val.front() == ' ' || val.front() == '\t')) val.remove_prefix(1);
    while (!val.empty() && (val.back() == ' ' || val.back() == '\r')) val.remove_suffix(1);
    auto flag = [&](bool& out) -> bool {
      if (val == "on")
        out = true;
      else if (val == "off")
        out = false;
      else
        return false;
      return true;
    };
    if (key == "RX") {
      if (!flag(p.rx)) return bad(what, "RX is " + quote_excerpt(val) + ", expected on/off");
      have_rx = true;
    } else if (key == "TX") {
      if (!flag(p.tx)) return bad(what, "TX is " + quote_excerpt(val) + ", expected on/off");
      have_tx = true;
    } else if (key == "Autonegotiate") {
      if (!flag(p.autoneg)) return bad(what, "Autonegotiate is " + quote_excerpt(val));
    }
  }
  if (!have_rx || !have_tx) {
    return bad(what, "no \"RX:\"/\"TX:\" lines in " + quote_excerpt(text));
  }
  return p;
}

std::string render_dcb_pfc(const dcb_pfc& p) {
  json j = json::object();
  j["pfc_cap"] = p.pfc_cap;
  j["macsec_bypass"] = p.macsec_bypass;
  j["delay"] = p.delay;
  j["prio_pfc"] = json::array();
  for (bool b : p.enabled) j["prio_pfc"].push_back(b);
  return json_text(j);
}

std::string render_dcb_app(const dcb_app& a) {
  // dcb prints the selectors in a fixed order and omits empty ones.
  std::string s = "{";
  bool first = true;
  if (!a.default_prio.empty()) {
    s += "\"default_prio\":" + json_text(json(a.default_prio));
    first = false;
  }
  if (!a.dscp_prio.empty()) {
    if (!first) s += ",";
    json arr = json::array();
    for (auto [d, p] : a.dscp_prio) arr.push_back(json::array({d, p}));
    s += "\"dscp_prio\":" + json_text(arr);
  }
  return s + "}";
}

std::string render_dcb_ets(const dcb_ets& e) {
  json j = json::object();
  j["willing"] = e.willing;
  j["ets_cap"] = 8;
  j["cbs"] = false;
  j["tc_bw"] = e.tc_bw;
  j["pg_bw"] = std::array<int, 8>{};
  j["tc_tsa"] = e.tc_tsa;
  j["prio_tc"] = e.prio_tc;
  j["reco_tc_bw"] = std::array<int, 8>{};
  j["reco_tc_tsa"] = std::array<std::string, 8>{"strict", "strict", "strict", "strict",
                                                "strict", "strict", "strict", "strict"};
  j["reco_prio_tc"] = std::array<int, 8>{};
  return json_text(j);
}

std::string render_dcb_apptrust(const std::vector<std::string>& order) {
  return json_text(json{{"order", order}});
}

std::string render_ethtool_pause(std::string_view ifname, const pause_state& p) {
  auto on = [](bool b) { return b ? "on" : "off"; };
  return "Pause parameters for " + std::string(ifname) + ":\nAutonegotiate:\t" + on(p.autoneg) +
         "\nRX:\t\t" + on(p.rx) + "\nTX:\t\t" + on(p.tx) + "\n\n";
}

}  // namespace shoal::netsetup
