#pragma once
// Parsers for what the host tools print. The JSON shapes are iproute2's (dcb/dcb_pfc.c,
// dcb_app.c, dcb_ets.c, dcb_apptrust.c with lib/json_print.c); the ethtool pause block is the
// text every ethtool version prints for `ethtool -a`. Inputs are untrusted: anything that does
// not have the expected shape is an errc::command_output error naming the command, never a crash.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace shoal::netsetup {

// `dcb -j pfc show dev X`:
//   {"pfc_cap":8,"macsec_bypass":false,"delay":0,"prio_pfc":[false,false,false,true,...]}
struct dcb_pfc {
  std::array<bool, 8> enabled{};  // prio_pfc, indexed by priority
  int pfc_cap = 0;
  int delay = 0;
  bool macsec_bypass = false;
  friend bool operator==(const dcb_pfc&, const dcb_pfc&) = default;
};

// `dcb -j app show dev X`: {"default_prio":[0],"dscp_prio":[[24,3],[26,3]], ...}. Only the
// parts netsetup uses are kept; other selectors are accepted and ignored.
struct dcb_app {
  std::vector<std::pair<int, int>> dscp_prio;  // (dscp 0..63, priority 0..7), sorted
  std::vector<int> default_prio;
  friend bool operator==(const dcb_app&, const dcb_app&) = default;
};

// `dcb -j ets show dev X`: {"willing":false,"ets_cap":8,"cbs":false,"tc_bw":[..8],
//   "pg_bw":[..8],"tc_tsa":["strict",..8],"prio_tc":[..8],"reco_tc_bw":..,...}
struct dcb_ets {
  std::array<int, 8> prio_tc{};
  std::array<int, 8> tc_bw{};
  std::array<std::string, 8> tc_tsa{};
  bool willing = false;
  friend bool operator==(const dcb_ets&, const dcb_ets&) = default;
};

// `ethtool -a X` (text): "Pause parameters for X:\nAutonegotiate:\ton\nRX:\t\toff\nTX:\t\toff\n"
struct pause_state {
  bool autoneg = false;
  bool rx = false;
  bool tx = false;
  friend bool operator==(const pause_state&, const pause_state&) = default;
};

// `what` is the command line, used in error messages.
[[nodiscard]] result<dcb_pfc> parse_dcb_pfc(std::string_view json, std::string_view what);
[[nodiscard]] result<dcb_app> parse_dcb_app(std::string_view json, std::string_view what);
[[nodiscard]] result<dcb_ets> parse_dcb_ets(std::string_view json, std::string_view what);
// `dcb -j apptrust show dev X`: {"order":["dscp"]} → {"dscp"}.
[[nodiscard]] result<std::vector<std::string>> parse_dcb_apptrust(std::string_view json,
                                                                  std::string_view what);
[[nodiscard]] result<pause_state> parse_ethtool_pause(std::string_view text, std::string_view what);

// Renderers of the same formats, used by test doubles so canned output comes from one place.
[[nodiscard]] std::string render_dcb_pfc(const dcb_pfc& p);
[[nodiscard]] std::string render_dcb_app(const dcb_app& a);
[[nodiscard]] std::string render_dcb_ets(const dcb_ets& e);
[[nodiscard]] std::string render_dcb_apptrust(const std::vector<std::string>& order);
[[nodiscard]] std::string render_ethtool_pause(std::string_view ifname, const pause_state& p);

}  // namespace shoal::netsetup
