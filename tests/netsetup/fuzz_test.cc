// Bounded random inputs (fixed seeds, so failures reproduce) for everything that parses what a
// node or a peer hands us: the sysfs value parsers, discovery over a tree with one file replaced
// by garbage, the dcb/ethtool parsers, and the discovery-document reader followed by every
// consumer of a peer's document (validation, plan, NCCL env, cluster configs).

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "netsetup/errc.h"
#include "netsetup/job_outputs.h"
#include "netsetup/plan.h"
#include "netsetup/tool_output.h"
#include "netsetup/validate.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

std::string random_bytes(std::mt19937& rng, std::size_t max_len) {
  static const std::string alphabet =
      "0123456789abcdefxX .:-+\n\t/GT/sPCIeUnknown{}[]\",truefalsenull\x01\xff";
  std::uniform_int_distribution<std::size_t> len(0, max_len);
  std::uniform_int_distribution<int> pick(0, 3);
  std::string s;
  const std::size_t n = len(rng);
  for (std::size_t i = 0; i < n; ++i) {
    if (pick(rng) == 0) {
      s += static_cast<char>(rng() & 0xff);
    } else {
      s += alphabet[rng() % alphabet.size()];
    }
  }
  return s;
}

// Mutates a valid text: flips, deletes, duplicates and inserts bytes.
std::string mutate(std::mt19937& rng, std::string s) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const std::size_t at = rng() % s.size();
    switch (rng() % 4) {
      case 0:
        s[at] = static_cast<char>(rng() & 0xff);
        break;
      case 1:
        s.erase(at, 1 + rng() % 8);
        break;
      case 2:
        s.insert(at, s.substr(at, 1 + rng() % 16));
        break;
      default:
        s.insert(at, random_bytes(rng, 8));
        break;
    }
  }
  return s;
}

TEST(NetsetupFuzz, SysfsValueParsers) {
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    const std::string s = random_bytes(rng, 48);
    for (auto r : {parse_int(s, "/f").has_value(), parse_hex(s, "/f").has_value()}) (void)r;
    auto i64 = parse_int(s, "/sys/f");
    if (!i64) {
      EXPECT_EQ(i64.error().code, make_error_code(errc::sysfs_garbage));
      EXPECT_TRUE(i64.error().message.starts_with("/sys/f: ")) << i64.error().message;
    }
    if (auto tc = parse_traffic_class(s, "/sys/f"); tc && *tc) {
      EXPECT_GE(**tc, 0);
      EXPECT_LE(**tc, 255);
    }
    auto sp = parse_link_speed(s, "/sys/f");
    if (sp && *sp) {
      EXPECT_GT(**sp, 0.0);
      EXPECT_LE(**sp, 1000.0);
    }
    EXPECT_LE(quote_excerpt(s).size(), 2 + 40 * 4 + 3u);
  }
}

TEST(NetsetupFuzz, DiscoveryOverATreeWithOneFileOfGarbage) {
  auto f = vela_vm();
  std::vector<std::string> files;
  for (auto it = std::filesystem::recursive_directory_iterator(f.tree->root() + "/sys");
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (it->is_regular_file() && !it->is_symlink()) files.push_back(it->path().string());
  }
  ASSERT_GT(files.size(), 100u);
  std::mt19937 rng(2);
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    const std::string& file = files[rng() % files.size()];
    const std::string kpath = file.substr(f.tree->root().size());
    const std::string original = f.tree->read(kpath);
    const std::string garbage = rng() % 2 ? random_bytes(rng, 40) : mutate(rng, original);
    f.tree->write(kpath, garbage);
    auto inv = f.try_discover();
    if (!inv) {
      ++refused;
      // The error names a file of the tree, and the code says what kind of problem it is.
      EXPECT_NE(inv.error().message.find(f.tree->root()), std::string::npos)
          << kpath << " <- " << quote_excerpt(garbage) << ": " << inv.error().message;
      EXPECT_EQ(inv.error().code.category(), netsetup_category());
    } else {
      // Whatever was accepted still serializes and reads back.
      auto back = parse_inventory(to_json(*inv).dump());
      EXPECT_TRUE(back) << kpath << ": " << (back ? "" : back.error().message);
    }
    f.tree->write(kpath, original);
  }
  EXPECT_GT(refused, 50);  // the fuzzer does reach the strict parsers
  EXPECT_TRUE(f.try_discover());
}

TEST(NetsetupFuzz, ToolOutputParsers) {
  const std::vector<std::string> seeds = {
      render_dcb_pfc(dcb_pfc{{false, false, false, true, false, false, false, false}, 8, 0, false}),
      R"({"default_prio":[0],"dscp_prio":[[24,3],[26,3],[48,6]],"pcp_prio":[["0nd",0]]})",
      render_dcb_ets(dcb_ets{}), R"({"order":["pcp","dscp"]})",
      render_ethtool_pause("eth0", pause_state{true, true, false})};
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    const std::string s = i % 5 == 4 ? random_bytes(rng, 200) : mutate(rng, seeds[i % 5]);
    auto check = [&](auto r) {
      if (!r) {
        EXPECT_EQ(r.error().code, make_error_code(errc::command_output)) << s;
        EXPECT_TRUE(r.error().message.starts_with("cmd: ")) << r.error().message;
      }
    };
    check(parse_dcb_pfc(s, "cmd"));
    check(parse_dcb_app(s, "cmd"));
    check(parse_dcb_ets(s, "cmd"));
    check(parse_dcb_apptrust(s, "cmd"));
    check(parse_ethtool_pause(s, "cmd"));
  }
  // Deep nesting and huge numbers are shapes, not crashes.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(parse_dcb_pfc(deep, "cmd"));
  EXPECT_FALSE(parse_dcb_app(R"({"dscp_prio":[[1e400,3]]})", "cmd"));
  EXPECT_FALSE(parse_dcb_app(R"({"dscp_prio":[[18446744073709551616,3]]})", "cmd"));
}

// Replaces one random value somewhere in the document with a random JSON value.
void mutate_json(std::mt19937& rng, nlohmann::json& j, int depth = 0) {
  const bool container = j.is_object() || j.is_array();
  if (!container || j.empty() || depth > 8 || rng() % 6 == 0) {
    switch (rng() % 9) {
      case 0:
        j = nullptr;
        break;
      case 1:
        j = static_cast<std::int64_t>(rng()) - (1LL << 31);
        break;
      case 2:
        j = -1;
        break;
      case 3:
        j = "garbage";
        break;
      case 4:
        j = nlohmann::json::array({1, "x", nullptr});
        break;
      case 5:
        j = nlohmann::json::object({{"k", 1}});
        break;
      case 6:
        j = 1e300;
        break;
      case 7:
        j = true;
        break;
      default:
        j = std::string(1 + rng() % 300, 'a');
        break;
    }
    return;
  }
  auto it = j.begin();
  std::advance(it, static_cast<long>(rng() % j.size()));
  if (j.is_object() && rng() % 10 == 0) {
    j.erase(it);
    return;
  }
  mutate_json(rng, *it, depth + 1);
}

TEST(NetsetupFuzz, PeerDocumentsAndEverythingThatConsumesThem) {
  std::vector<nlohmann::json> seeds;
  {
    auto a = h100(node_state::converged);
    auto b = dgx_a100(node_state::fresh);
    auto c = vela_vm();
    seeds = {to_json(a.discover()), to_json(b.discover()), to_json(c.discover())};
  }
  const node_inventory reference = *inventory_from_json(seeds[0]);
  policy pol;
  pol.gid_subnet_prefix = 16;
  pol.cluster.ipam = R"({"type":"dhcp"})";
  std::mt19937 rng(4);
  int accepted = 0;
  for (int i = 0; i < 1500; ++i) {
    nlohmann::json doc = seeds[static_cast<std::size_t>(i) % seeds.size()];
    for (int m = 1 + static_cast<int>(rng() % 3); m > 0; --m) mutate_json(rng, doc);
    std::string text = doc.dump();
    if (i % 7 == 0) text = mutate(rng, text);
    auto inv = parse_inventory(text);
    if (!inv) {
      EXPECT_EQ(inv.error().code, make_error_code(errc::bad_document));
      continue;
    }
    ++accepted;
    // A peer's document that passed the reader must be safe for every consumer.
    (void)validate_node(*inv, pol);
    std::vector<node_inventory> nodes{reference, *inv};
    (void)validate_cluster(nodes, pol);
    (void)make_plan(*inv, pol);
    (void)make_nccl_env(*inv, {}, pol);
    (void)cluster_configs(*inv, pol);
    (void)to_json(*inv).dump();
  }
  EXPECT_GT(accepted, 100);
  EXPECT_FALSE(parse_inventory(std::string(100000, '[') + std::string(100000, ']')));
  EXPECT_FALSE(parse_inventory(R"({"schema":2,"node":"x"})"));
}

}  // namespace
}  // namespace shoal::netsetup
