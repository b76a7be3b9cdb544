// netsetup's readers of what tools and the kernel print: dcb -j (pfc, app, ets, apptrust),
// ethtool -a, sysfs values (integers, hex flags, PCIe link speeds), and the discovery document a
// peer hands over. Every input goes through every parser: none crashes, errors are UTF-8 and
// bounded, a tool output that parses renders back to one that parses to the same value, and an
// inventory that parses survives to_json.
#include <nlohmann/json.hpp>

#include "netsetup/inventory.h"
#include "netsetup/sysfs.h"
#include "netsetup/tool_output.h"
#include "../harness.h"

namespace {

using namespace shoal;
using namespace shoal::netsetup;

template <class T, class Parse, class Render>
void round_trip(std::string_view in, Parse parse, Render render, const char* what) {
  auto v = parse(in, "dcb -j show dev eth0");
  fuzz::check_result(v, what);
  if (!v) return;
  fuzz::accepted();
  const std::string out = render(*v);
  auto again = parse(out, "render");
  if (!again || !(*again == *v)) fuzz::check_failed(what, "render does not parse back: " + out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = fuzz::text(data, size);
  round_trip<dcb_pfc>(in, parse_dcb_pfc, render_dcb_pfc, "parse_dcb_pfc");
  round_trip<dcb_app>(in, parse_dcb_app, render_dcb_app, "parse_dcb_app");
  round_trip<dcb_ets>(in, parse_dcb_ets, render_dcb_ets, "parse_dcb_ets");
  round_trip<std::vector<std::string>>(in, parse_dcb_apptrust, render_dcb_apptrust,
                                       "parse_dcb_apptrust");
  auto pause = parse_ethtool_pause(in, "ethtool -a eth0");
  fuzz::check_result(pause, "parse_ethtool_pause");
  if (pause) {
    fuzz::accepted();
    auto again = parse_ethtool_pause(render_ethtool_pause("eth0", *pause), "render");
    if (!again || !(*again == *pause)) fuzz::check_failed("ethtool pause round trip", "");
  }
  fuzz::check_result(parse_int(in, "/sys/class/net/eth0/mtu"), "parse_int");
  fuzz::check_result(parse_hex(in, "/sys/class/net/eth0/flags"), "parse_hex");
  fuzz::check_result(parse_link_speed(in, "/sys/bus/pci/devices/x/current_link_speed"),
                     "parse_link_speed");
  auto inv = parse_inventory(in);
  fuzz::check_result(inv, "parse_inventory");
  if (inv) {
    fuzz::accepted();
    (void)to_json(*inv).dump();
  }
  return 0;
}
