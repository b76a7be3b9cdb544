// Parsers of dcb JSON and ethtool pause text, on output in the shapes iproute2 and ethtool print
// (dcb/dcb_pfc.c, dcb_app.c, dcb_ets.c, dcb_apptrust.c; ethtool netlink/pause.c).

#include "netsetup/tool_output.h"

#include <gtest/gtest.h>

#include "netsetup/errc.h"

namespace shoal::netsetup {
namespace {

TEST(NetsetupToolOutput, DcbPfcShow) {
  // dcb -j pfc show dev eth0
  auto p = parse_dcb_pfc(R"({"pfc_cap":8,"macsec_bypass":false,"delay":4096,)"
                         R"("prio_pfc":[false,false,false,true,false,false,false,false]})",
                         "dcb -j pfc show dev eth0");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->pfc_cap, 8);
  EXPECT_EQ(p->delay, 4096);
  EXPECT_TRUE(p->enabled[3]);
  EXPECT_FALSE(p->enabled[0]);
  // dcb -s -j -p: statistics and pretty printing.
  auto s = parse_dcb_pfc(R"({
    "pfc_cap": 8, "macsec_bypass": false, "delay": 0,
    "prio_pfc": [ false,false,false,false,false,false,true,true ],
    "requests": [ 0,0,0,12,0,0,0,0 ], "indications": [ 0,0,0,7,0,0,0,0 ] })",
                         "x");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(s->enabled[6] && s->enabled[7]);
  EXPECT_EQ(parse_dcb_pfc(render_dcb_pfc(*p), "x").value(), *p);
}

TEST(NetsetupToolOutput, DcbAppShow) {
  // dcb -j app show dev eth0: DSCP keys are numbers in JSON even without -N.
  auto a = parse_dcb_app(R"({"default_prio":[0],"dscp_prio":[[48,6],[24,3],[26,3]],)"
                         R"("pcp_prio":[["0nd",0],["3nd",3]],"ethtype_prio":[["8906",3]]})",
                         "dcb -j app show dev eth0");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->dscp_prio, (std::vector<std::pair<int, int>>{{24, 3}, {26, 3}, {48, 6}}));
  EXPECT_EQ(a->default_prio, std::vector<int>{0});
  auto empty = parse_dcb_app("{}", "x");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->dscp_prio.empty());
  EXPECT_EQ(parse_dcb_app(render_dcb_app(*a), "x").value(), *a);
}

TEST(NetsetupToolOutput, DcbEtsAndApptrust) {
  auto e = parse_dcb_ets(
      R"({"willing":false,"ets_cap":8,"cbs":false,"tc_bw":[0,0,0,100,0,0,0,0],)"
      R"("pg_bw":[0,0,0,0,0,0,0,0],"tc_tsa":["strict","strict","strict","ets","strict",)"
      R"("strict","strict","strict"],"prio_tc":[0,1,2,3,4,5,6,7],"reco_tc_bw":[0,0,0,0,0,0,0,0],)"
      R"("reco_tc_tsa":["strict","strict","strict","strict","strict","strict","strict",)"
      R"("strict"],"reco_prio_tc":[0,0,0,0,0,0,0,0]})",
      "dcb -j ets show dev eth0");
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->prio_tc[3], 3);
  EXPECT_EQ(e->tc_bw[3], 100);
  EXPECT_EQ(e->tc_tsa[3], "ets");
  EXPECT_EQ(parse_dcb_ets(render_dcb_ets(*e), "x").value(), *e);
  auto t = parse_dcb_apptrust(R"({"order":["pcp","dscp"]})", "x");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t, (std::vector<std::string>{"pcp", "dscp"}));
  EXPECT_EQ(*parse_dcb_apptrust(render_dcb_apptrust({"dscp"}), "x"),
            std::vector<std::string>{"dscp"});
}

TEST(NetsetupToolOutput, EthtoolPause) {
  auto p = parse_ethtool_pause(
      "Pause parameters for ens1f0:\nAutonegotiate:\ton\nRX:\t\ton\n"
      "TX:\t\toff\nRX negotiated: on\nTX negotiated: off\n\n",
      "ethtool -a ens1f0");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->autoneg);
  EXPECT_TRUE(p->rx);
  EXPECT_FALSE(p->tx);
  pause_state off{false, false, false};
  EXPECT_EQ(parse_ethtool_pause(render_ethtool_pause("x", off), "x").value(), off);
}

TEST(NetsetupToolOutput, ShapesThatAreNotTheToolsAreErrorsNamingTheCommand) {
  const char* cmd = "dcb -j pfc show dev eth0";
  for (const char* bad : {"", "not json", "[]", "{}", R"({"prio_pfc":[true]})",
                          R"({"prio_pfc":[0,0,0,1,0,0,0,0]})", R"({"prio_pfc":"on"})",
                          R"({"prio_pfc":[false,false,false,true,false,false,false,false],)"
                          R"("delay":-1})",
                          "{\"prio_pfc\":[false,false,false,true,false,false,false,false"}) {
    auto r = parse_dcb_pfc(bad, cmd);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, make_error_code(errc::command_output));
    EXPECT_TRUE(r.error().message.starts_with(cmd)) << r.error().message;
  }
  for (const char* bad :
       {R"({"dscp_prio":[[64,3]]})", R"({"dscp_prio":[[26,8]]})", R"({"dscp_prio":[[26]]})",
        R"({"dscp_prio":[["26",3]]})", R"({"dscp_prio":{"26":3}})", R"({"default_prio":[9]})"}) {
    EXPECT_FALSE(parse_dcb_app(bad, "x")) << bad;
  }
  EXPECT_FALSE(parse_dcb_apptrust(R"({"order":"dscp"})", "x"));
  EXPECT_FALSE(parse_dcb_apptrust(R"({"order":[3]})", "x"));
  EXPECT_FALSE(parse_dcb_ets(R"({"prio_tc":[0,1,2,3,4,5,6,9]})", "x"));
  EXPECT_FALSE(parse_ethtool_pause("Cannot get device pause settings: No such device\n", "x"));
  EXPECT_FALSE(parse_ethtool_pause("RX:\tmaybe\nTX:\toff\n", "x"));
  EXPECT_FALSE(parse_dcb_pfc(std::string(300 * 1024, ' '), "x"));
}

}  // namespace
}  // namespace shoal::netsetup
