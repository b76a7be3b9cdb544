// The sysfs reader: values, links, and garbage (empty files, non-numbers, dangling or looping
// links, missing directories) turned into errors that name the path.

#include "netsetup/sysfs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "netsetup/discover.h"
#include "netsetup/errc.h"
#include "sysfs_tree.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

bool has_code(const error& e, errc c) { return e.code == make_error_code(c); }

TEST(NetsetupSysfs, ReadsValuesUnderTheRoot) {
  sysfs_tree t;
  t.write("/sys/x/mtu", "9000\n");
  t.write("/sys/x/vendor", "0x15b3\n");
  t.write("/sys/x/neg", "-1\n");
  sysfs fs(t.root() + "/");
  EXPECT_EQ(fs.path("/sys/x/mtu"), t.root() + "/sys/x/mtu");
  EXPECT_EQ(*fs.read("/sys/x/mtu"), "9000");
  EXPECT_EQ(*fs.read_int("/sys/x/mtu"), 9000);
  EXPECT_EQ(*fs.read_int("/sys/x/neg"), -1);
  EXPECT_EQ(*fs.read_hex("/sys/x/vendor"), 0x15b3u);
  EXPECT_FALSE(fs.read_optional("/sys/x/none")->has_value());
  EXPECT_FALSE(fs.read_int_optional("/sys/x/none")->has_value());
  EXPECT_TRUE(fs.list_optional("/sys/nodir")->empty());
}

TEST(NetsetupSysfs, GarbageIsAnErrorNamingThePath) {
  sysfs_tree t;
  t.write("/sys/x/empty", "");
  t.write("/sys/x/abc", "abc\n");
  t.write("/sys/x/half", "12abc\n");
  t.write("/sys/x/hexless", "15b3\n");
  t.write("/sys/x/bin", std::string("\x01\xff\n", 3));
  sysfs fs(t.root());
  auto e1 = fs.read_int("/sys/x/empty");
  ASSERT_FALSE(e1);
  EXPECT_TRUE(has_code(e1.error(), errc::sysfs_garbage));
  EXPECT_NE(e1.error().message.find(t.root() + "/sys/x/empty"), std::string::npos);
  EXPECT_NE(e1.error().message.find("empty"), std::string::npos);
  auto e2 = fs.read_int("/sys/x/abc");
  ASSERT_FALSE(e2);
  EXPECT_NE(e2.error().message.find("expected an integer, got \"abc\""), std::string::npos)
      << e2.error().message;
  EXPECT_FALSE(fs.read_int("/sys/x/half"));
  auto e3 = fs.read_hex("/sys/x/hexless");
  ASSERT_FALSE(e3);
  EXPECT_NE(e3.error().message.find("0x15b3"), std::string::npos);
  auto e4 = fs.read_int("/sys/x/bin");
  ASSERT_FALSE(e4);
  EXPECT_NE(e4.error().message.find("\\x01\\xff"), std::string::npos) << e4.error().message;
  auto e5 = fs.read_int("/sys/x/missing");
  ASSERT_FALSE(e5);
  EXPECT_TRUE(has_code(e5.error(), errc::sysfs_missing));
  auto e6 = fs.read("/sys/x");
  ASSERT_FALSE(e6);
  EXPECT_NE(e6.error().message.find("is a directory"), std::string::npos);
  auto e7 = fs.list("/sys/nodir");
  ASSERT_FALSE(e7);
  EXPECT_TRUE(has_code(e7.error(), errc::sysfs_missing));
}

TEST(NetsetupSysfs, HugeFilesAreRefused) {
  sysfs_tree t;
  t.write("/sys/x/big", std::string(100 * 1024, '1'));
  auto r = sysfs(t.root()).read("/sys/x/big");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("64 KiB"), std::string::npos);
}

TEST(NetsetupSysfs, ResolvesRelativeLinkChainsLikeTheKernel) {
  sysfs_tree t;
  auto hb = t.host_bridge("0000:17", 0);
  auto rp = t.bridge(hb, "0000:17:01.0");
  t.gpu(rp, "0000:18:00.0");
  sysfs fs(t.root());
  EXPECT_EQ(*fs.resolve("/sys/bus/pci/devices/0000:18:00.0"),
            "/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0");
  EXPECT_EQ(*fs.resolve("/sys/bus/pci/devices/0000:18:00.0/driver"), "/sys/bus/pci/drivers/nvidia");
  EXPECT_EQ(**fs.link_basename("/sys/bus/pci/devices/0000:18:00.0/driver"), "nvidia");
  EXPECT_FALSE(fs.link_basename("/sys/bus/pci/devices/0000:18:00.0/vendor")->has_value());
}

TEST(NetsetupSysfs, DanglingLoopingAndEscapingLinks) {
  sysfs_tree t;
  t.mkdirs("/sys/a");
  t.symlink("/sys/a/dangling", "/sys/devices/nowhere");
  t.symlink("/sys/a/loop1", "/sys/a/loop2");
  t.symlink("/sys/a/loop2", "/sys/a/loop1");
  t.write("/sys/a/target", "1\n");
  // An absolute link and one climbing above the root both stay inside the root.
  std::filesystem::create_symlink("/sys/a/target", t.real("/sys/a/absolute"));
  std::filesystem::create_symlink("../../../../../../../sys/a/target", t.real("/sys/a/climb"));
  sysfs fs(t.root());
  auto d = fs.resolve("/sys/a/dangling");
  ASSERT_FALSE(d);
  EXPECT_TRUE(has_code(d.error(), errc::sysfs_missing));
  EXPECT_NE(d.error().message.find("dangling link"), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find(t.root() + "/sys/a/dangling"), std::string::npos);
  auto l = fs.resolve("/sys/a/loop1");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().message.find("too many levels"), std::string::npos);
  EXPECT_EQ(*fs.resolve("/sys/a/absolute"), "/sys/a/target");
  EXPECT_EQ(*fs.resolve("/sys/a/climb"), "/sys/a/target");
}

TEST(NetsetupSysfs, WriteNeedsAnExistingAttribute) {
  sysfs_tree t;
  t.write("/sys/x/mtu", "1500\n");
  sysfs fs(t.root());
  ASSERT_TRUE(fs.write("/sys/x/mtu", "9000"));
  EXPECT_EQ(t.read("/sys/x/mtu"), "9000\n");
  auto w = fs.write("/sys/x/new", "1");
  ASSERT_FALSE(w);
  EXPECT_TRUE(has_code(w.error(), errc::sysfs_missing));
  EXPECT_NE(w.error().message.find("/sys/x/new"), std::string::npos);
}

TEST(NetsetupSysfs, LinkSpeedParsing) {
  EXPECT_EQ(*parse_link_speed("16.0 GT/s PCIe", "f"), 16.0);
  EXPECT_EQ(*parse_link_speed("8 GT/s", "f"), 8.0);
  EXPECT_EQ(*parse_link_speed("2.5 GT/s PCIe\n", "f"), 2.5);
  EXPECT_FALSE(parse_link_speed("Unknown", "f")->has_value());
  EXPECT_FALSE(parse_link_speed("Unknown speed", "f")->has_value());
  EXPECT_FALSE(parse_link_speed("", "f"));
  EXPECT_FALSE(parse_link_speed("fast", "f"));
  EXPECT_FALSE(parse_link_speed("16.0", "f"));
  EXPECT_FALSE(parse_link_speed("-8 GT/s", "f"));
  EXPECT_FALSE(parse_link_speed("nan GT/s", "f"));
  EXPECT_FALSE(parse_link_speed("1e9 GT/s", "f"));
}

// An RDMA port's traffic class as the kernel and MLNX_OFED print it. OFED prints nothing until a
// class is written (discovery of a fresh node failed on it as garbage), and per-destination
// rules after the global line (the last number on the page was taken for the port's class).
TEST(NetsetupSysfs, TrafficClassParsing) {
  EXPECT_EQ(**parse_traffic_class("106", "f"), 106);
  EXPECT_EQ(**parse_traffic_class("106\n", "f"), 106);
  EXPECT_EQ(**parse_traffic_class("Global tclass=106", "f"), 106);
  EXPECT_EQ(**parse_traffic_class("Global tclass=106\ndst_ip=10.0.0.0/24,tclass=96\n", "f"), 106);
  EXPECT_EQ(**parse_traffic_class("Global tclass=0", "f"), 0);
  EXPECT_FALSE(parse_traffic_class("", "f")->has_value());
  EXPECT_FALSE(parse_traffic_class("\n", "f")->has_value());
  EXPECT_FALSE(parse_traffic_class("Global tclass=-1", "f")->has_value());
  for (const char* bad : {"Global tclass=256", "Global tclass=", "tclass=5", "x106", "-5",
                          "Global tclass=1x", "99999999999999999999"}) {
    auto r = parse_traffic_class(bad, "/sys/f");
    ASSERT_FALSE(r) << bad;
    EXPECT_TRUE(has_code(r.error(), errc::sysfs_garbage));
    EXPECT_TRUE(r.error().message.starts_with("/sys/f: ")) << r.error().message;
  }
}

// Garbage in the files discovery needs, on a full topology: a clear error naming the file.
struct broken_file {
  const char* what;
  std::function<std::string(node_fixture&)> damage;  // returns the path the error must name
};

TEST(NetsetupSysfs, DiscoveryRefusesGarbageWithTheFileName) {
  const std::vector<broken_file> cases = {
      {"empty mtu",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens3np0") + "/mtu", "");
         return std::string("/sys/class/net/ens3np0/mtu");
       }},
      {"non-numeric mtu",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens3np0") + "/mtu", "jumbo\n");
         return std::string("/sys/class/net/ens3np0/mtu");
       }},
      {"vendor without 0x",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.pfs[1] + "/vendor";
         f.tree->write(p, "mellanox\n");
         return p;
       }},
      {"garbage class",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.gpus[2] + "/class";
         f.tree->write(p, "0xzz\n");
         return p;
       }},
      {"numa node out of range",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.gpus[0] + "/numa_node";
         f.tree->write(p, "99999\n");
         return p;
       }},
      {"garbage link speed",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.gpus[0] + "/current_link_speed";
         f.tree->write(p, "very fast\n");
         return p;
       }},
      {"dangling bus link",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/0000:ee:00.0";
         f.tree->symlink(p, "/sys/devices/pci0000:ee/0000:ee:00.0");
         return p;
       }},
      {"dangling netdev class link",
       [](node_fixture& f) {
         // The PCI function still lists the netdev, but its class entry points nowhere.
         f.tree->remove("/sys/class/net/ens4np0");
         f.tree->symlink("/sys/class/net/ens4np0", "/sys/devices/virtual/net/gone");
         return std::string("/sys/class/net/ens4np0");
       }},
      {"missing gid file",
       [](node_fixture& f) {
         std::string p = "/sys/class/infiniband/mlx5_2/ports/1/gids/3";
         f.tree->remove(p);
         f.tree->mkdirs(p);  // a directory where a GID belongs
         return p;
       }},
      {"garbage gid",
       [](node_fixture& f) {
         std::string p = "/sys/class/infiniband/mlx5_2/ports/1/gids/3";
         f.tree->write(p, "fe80::1\n");
         return p;
       }},
      {"garbage port state",
       [](node_fixture& f) {
         std::string p = "/sys/class/infiniband/mlx5_1/ports/1/state";
         f.tree->write(p, "ACTIVE\n");
         return p;
       }},
      {"ecn flag not 0/1",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens6np0") + "/ecn/roce_np/enable/3", "2\n");
         return std::string("/sys/class/net/ens6np0/ecn/roce_np/enable/3");
       }},
      {"missing ecn priority file",
       [](node_fixture& f) {
         f.tree->remove(f.tree->netdev_dir("ens6np0") + "/ecn/roce_rp/enable/5");
         return std::string("/sys/class/net/ens6np0/ecn/roce_rp/enable/5");
       }},
      {"garbage sriov_numvfs",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.pfs[7] + "/sriov_numvfs";
         f.tree->write(p, "eight\n");
         return p;
       }},
      {"dangling virtfn",
       [](node_fixture& f) {
         std::string p = "/sys/bus/pci/devices/" + f.pfs[7] + "/virtfn9";
         f.tree->symlink(p, "/sys/devices/pci0000:00/0000:00:99.0");
         return p;
       }},
      {"garbage traffic class",
       [](node_fixture& f) {
         std::string p = "/sys/class/infiniband/mlx5_0/tc/1/traffic_class";
         f.tree->write(p, "Global tclass=\n");
         return p;
       }},
      {"qos trust not dscp/pcp",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens0np0") + "/qos/trust", "everything\n");
         return std::string("/sys/class/net/ens0np0/qos/trust");
       }},
  };
  for (const auto& c : cases) {
    auto f = h100(node_state::converged);
    const std::string path = c.damage(f);
    auto inv = f.try_discover();
    ASSERT_FALSE(inv) << c.what << ": discovery accepted the damage";
    EXPECT_NE(inv.error().message.find(path), std::string::npos)
        << c.what << ": message \"" << inv.error().message << "\" does not name " << path;
  }
}

}  // namespace
}  // namespace shoal::netsetup
