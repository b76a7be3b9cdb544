// `shoal-peerd mirror install|uninstall` (peerd/include/peerd/mirror_setup.h) on a temporary tree
// shaped like a node's /etc: originals come back byte for byte with their mode, install twice
// changes nothing, an edited file is kept, a failure half-way leaves the tree as it was, and the
// containerd config check says what to change.

#include "peerd/mirror_setup.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace shoal::peerd::mirror_setup {
namespace {

namespace fs = std::filesystem;

struct node_file {
  std::string bytes;
  unsigned mode = 0;
  bool operator==(const node_file&) const = default;
};

// Every file (bytes and mode) and every directory under `root`.
std::map<std::string, node_file> snapshot(const fs::path& root) {
  std::map<std::string, node_file> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    struct stat sb {};
    EXPECT_EQ(::lstat(e.path().c_str(), &sb), 0);
    auto rel = fs::relative(e.path(), root).string();
    if (e.is_directory()) {
      out[rel + "/"] = {"", sb.st_mode & 07777};
      continue;
    }
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out[rel] = {ss.str(), sb.st_mode & 07777};
  }
  return out;
}

void write(const fs::path& p, std::string_view bytes, unsigned mode) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  ASSERT_EQ(::chmod(p.c_str(), mode), 0);
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class MirrorSetup : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("shoal-mirror-setup-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "etc/containers/registries.conf.d");
    fs::create_directories(root_ / "var");  // the backup dir's parent, as /var/lib/shoal/peerd
    o_.certs_dir = root_ / "etc/containerd/certs.d";
    o_.containerd_config = root_ / "etc/containerd/config.toml";
    o_.backup_dir = root_ / "var/backup";
    o_.registries_conf_d = root_ / "etc/containers/registries.conf.d";
    cfg_.http.listen = "0.0.0.0:65001";
    cfg_.mirror.registries = {{.host = "docker.io", .server = "https://registry-1.docker.io"},
                              {.host = "registry.example:5000", .prefix = "example"}};
    // Originals: one with an odd mode, and a drop-in of the same name.
    write(o_.certs_dir + "/docker.io/hosts.toml", original_, 0604);
    write(o_.registries_conf_d + "/50-shoal.conf", "[[registry]]\nlocation = \"x\"\n", 0640);
    write(root_ / "etc/containerd/config.toml",
          "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"" +
              o_.certs_dir + "\"\n",
          0644);
  }
  void TearDown() override {
    if (!sealed_.empty()) set_immutable(sealed_, false);
    fs::remove_all(root_);
  }

  status run_install() {
    auto files = plan(cfg_, o_, collect());
    if (!files) return fail(files.error());
    return install(*files, o_, collect());
  }
  sink collect() {
    return [this](std::string_view l) { lines_.emplace_back(l); };
  }
  bool said(std::string_view what) const {
    for (const auto& l : lines_)
      if (l.find(what) != std::string::npos) return true;
    return false;
  }
  // A directory even root cannot write into: the immutable attribute (root ignores modes).
  static bool set_immutable(const fs::path& dir, bool on) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return false;
    int flags = 0;
    bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ok && ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    ::close(fd);
    return ok;
  }

  const std::string original_ = "server = \"https://mirror.corp\"\n# the operator's own\n";
  fs::path root_;
  fs::path sealed_;
  options o_;
  peerd_config cfg_;
  std::vector<std::string> lines_;
};

TEST_F(MirrorSetup, InstallThenUninstallRestoresBytesAndModes) {
  const auto before = snapshot(root_);
  ASSERT_TRUE(run_install()) << (lines_.empty() ? "" : lines_.back());
  const std::string docker = read(o_.certs_dir + "/docker.io/hosts.toml");
  EXPECT_NE(docker.find("server = \"https://registry-1.docker.io\""), std::string::npos) << docker;
  EXPECT_NE(docker.find("[host.\"http://127.0.0.1:65001\"]\n  capabilities = [\"pull\", "
                        "\"resolve\"]"),
            std::string::npos)
      << docker;
  const std::string example = read(o_.certs_dir + "/registry.example:5000/hosts.toml");
  EXPECT_NE(example.find("server = \"https://registry.example:5000\""), std::string::npos);
  const std::string fallback = read(o_.certs_dir + "/_default/hosts.toml");
  EXPECT_EQ(fallback.find("server ="), std::string::npos) << fallback;
  EXPECT_NE(fallback.find("[host.\"http://127.0.0.1:65001\"]"), std::string::npos);
  const std::string dropin = read(o_.registries_conf_d + "/50-shoal.conf");
  EXPECT_NE(dropin.find("location = \"127.0.0.1:65001/example\"\ninsecure = true"),
            std::string::npos)
      << dropin;
  // The originals sit in the backup dir under their relative paths, mode included.
  auto backup = snapshot(o_.backup_dir);
  EXPECT_EQ(backup["certs.d/docker.io/hosts.toml"], (node_file{original_, 0604}));
  EXPECT_EQ(backup["registries.conf.d/50-shoal.conf"].mode, 0640u);
  EXPECT_TRUE(backup.contains("manifest.json"));

  lines_.clear();
  ASSERT_TRUE(uninstall(o_, collect()));
  EXPECT_TRUE(said("restored " + o_.certs_dir + "/docker.io/hosts.toml"));
  EXPECT_TRUE(said("removed " + o_.certs_dir + "/_default/hosts.toml"));
  EXPECT_EQ(snapshot(root_), before) << "uninstall must leave the tree exactly as it was";
}

TEST_F(MirrorSetup, InstallTwiceIsIdempotent) {
  ASSERT_TRUE(run_install());
  const auto once = snapshot(root_);
  lines_.clear();
  ASSERT_TRUE(run_install());
  EXPECT_EQ(snapshot(root_), once);
  EXPECT_TRUE(said("unchanged " + o_.certs_dir + "/docker.io/hosts.toml"));
  EXPECT_FALSE(said("backed up"));
  // Its own file was never taken for an original: uninstall gives back the operator's.
  ASSERT_TRUE(uninstall(o_, collect()));
  EXPECT_EQ(read(o_.certs_dir + "/docker.io/hosts.toml"), original_);
}

TEST_F(MirrorSetup, ConfigChangeRewritesAndDroppedRegistryGetsItsOriginal) {
  ASSERT_TRUE(run_install());
  cfg_.http.listen = "127.0.0.1:7000";
  cfg_.mirror.registries.resize(1);  // registry.example:5000 no longer mirrored
  lines_.clear();
  ASSERT_TRUE(run_install());
  EXPECT_NE(read(o_.certs_dir + "/docker.io/hosts.toml").find("http://127.0.0.1:7000"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(o_.certs_dir + "/registry.example:5000/hosts.toml"));
  EXPECT_FALSE(said("backed up"));
  ASSERT_TRUE(uninstall(o_, collect()));
  EXPECT_EQ(read(o_.certs_dir + "/docker.io/hosts.toml"), original_);
}

TEST_F(MirrorSetup, EditedFileIsKeptAndSaidSo) {
  ASSERT_TRUE(run_install());
  const fs::path docker = o_.certs_dir + "/docker.io/hosts.toml";
  std::ofstream(docker, std::ios::app) << "# tuned by hand\n";
  const std::string edited = read(docker);
  lines_.clear();
  ASSERT_TRUE(run_install());
  EXPECT_TRUE(said("kept " + docker.string() + ": edited"));
  EXPECT_EQ(read(docker), edited);
  lines_.clear();
  ASSERT_TRUE(uninstall(o_, collect()));
  EXPECT_TRUE(said("kept " + docker.string() + ": edited"));
  EXPECT_EQ(read(docker), edited);
  // The others are restored; the edited file's original stays in the backup dir.
  EXPECT_EQ(read(o_.registries_conf_d + "/50-shoal.conf"), "[[registry]]\nlocation = \"x\"\n");
  EXPECT_FALSE(fs::exists(o_.certs_dir + "/_default"));
  EXPECT_EQ(read(o_.backup_dir + "/certs.d/docker.io/hosts.toml"), original_);
  EXPECT_TRUE(fs::exists(o_.backup_dir + "/manifest.json"));
}

TEST_F(MirrorSetup, FailureHalfWayLeavesTheOriginalState) {
  const auto before = snapshot(root_);
  // The drop-in comes last: every hosts.toml and backup is done when its directory refuses.
  sealed_ = o_.registries_conf_d;
  if (::geteuid() == 0) {
    if (!set_immutable(sealed_, true)) GTEST_SKIP() << "no immutable attribute on this filesystem";
  } else {
    ASSERT_EQ(::chmod(sealed_.c_str(), 0555), 0);
  }
  auto st = run_install();
  if (::geteuid() != 0) ::chmod(sealed_.c_str(), 0755);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find(o_.registries_conf_d), std::string::npos) << st.error().message;
  EXPECT_TRUE(said("undone: write " + o_.certs_dir + "/docker.io/hosts.toml"));
  if (::geteuid() == 0) set_immutable(sealed_, false);
  sealed_.clear();
  EXPECT_EQ(snapshot(root_), before) << "a failed install must leave no trace";
}

TEST_F(MirrorSetup, UninstallFailingHalfWayLeavesTheInstalledState) {
  ASSERT_TRUE(run_install());
  const auto installed = snapshot(root_);
  // The drop-in is restored last: the hosts.toml files are back when its directory refuses.
  sealed_ = o_.registries_conf_d;
  if (::geteuid() == 0) {
    if (!set_immutable(sealed_, true)) GTEST_SKIP() << "no immutable attribute on this filesystem";
  } else {
    ASSERT_EQ(::chmod(sealed_.c_str(), 0555), 0);
  }
  lines_.clear();
  auto st = uninstall(o_, collect());
  if (::geteuid() == 0) set_immutable(sealed_, false);
  if (::geteuid() != 0) ::chmod(sealed_.c_str(), 0755);
  sealed_.clear();
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("restore " + o_.registries_conf_d + "/50-shoal.conf"),
            std::string::npos)
      << st.error().message;
  EXPECT_TRUE(said("undone: restore " + o_.certs_dir + "/docker.io/hosts.toml"));
  EXPECT_EQ(snapshot(root_), installed) << "a failed uninstall must leave the install whole";
  ASSERT_TRUE(uninstall(o_, collect()));  // and it can be run again
  EXPECT_EQ(read(o_.certs_dir + "/docker.io/hosts.toml"), original_);
}

TEST_F(MirrorSetup, RefusesATargetItCannotBackUpFaithfullyBeforeAnyChange) {
  // A symbolic link would come back as a regular file: refused, nothing touched.
  const fs::path link = o_.certs_dir + "/registry.example:5000/hosts.toml";
  fs::create_directories(link.parent_path());
  fs::create_symlink(o_.certs_dir + "/docker.io/hosts.toml", link);
  const auto before = snapshot(root_);
  auto st = run_install();
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find(link.string() + " is a symbolic link"), std::string::npos)
      << st.error().message;
  EXPECT_EQ(snapshot(root_), before);
  EXPECT_TRUE(lines_.size() <= 1) << lines_.back();  // at most plan's own line, no action
}

TEST_F(MirrorSetup, OneRunAtATime) {
  const auto before = snapshot(root_);
  // Another run holds the lock on the backup dir's parent.
  int fd = ::open(fs::path(o_.backup_dir).parent_path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  auto st = run_install();
  ASSERT_FALSE(st);
  EXPECT_TRUE(st.error().is(errc::busy)) << st.error().message;
  EXPECT_EQ(snapshot(root_), before);
  ::close(fd);
  EXPECT_TRUE(run_install());
}

TEST_F(MirrorSetup, UninstallWithoutInstallChangesNothing) {
  const auto before = snapshot(root_);
  ASSERT_TRUE(uninstall(o_, collect()));
  EXPECT_TRUE(said("nothing to undo"));
  EXPECT_EQ(snapshot(root_), before);
}

TEST_F(MirrorSetup, ContainerdCheckAcceptsTheCertsDir) {
  auto c = check_containerd_config(o_.containerd_config, o_.certs_dir + "/");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->ok) << c->message;
}

TEST_F(MirrorSetup, ContainerdCheckSaysWhatToChange) {
  const fs::path conf = o_.containerd_config;
  write(conf,
        "version = 2\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n"
        "    sandbox_image = 'registry.k8s.io/pause:3.9'\n"
        "    [plugins.\"io.containerd.grpc.v1.cri\".registry]\n"
        "      config_path = \"/etc/elsewhere\"  # set by the distribution\n",
        0644);
  auto c = check_containerd_config(conf, o_.certs_dir);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find(conf.string() + ":6 sets config_path = \"/etc/elsewhere\""),
            std::string::npos)
      << c->message;
  EXPECT_NE(c->message.find("[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"" +
                            o_.certs_dir + "\""),
            std::string::npos)
      << c->message;
  // Version 1 names the plugin "cri"; no key at all says so.
  write(conf, "[plugins.cri]\n  sandbox_image = \"pause\"\n", 0644);
  c = check_containerd_config(conf, o_.certs_dir);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find("sets no config_path"), std::string::npos) << c->message;
  EXPECT_NE(c->message.find("[plugins.cri.registry]"), std::string::npos) << c->message;
  // An imported drop-in that sets it counts (containerd merges imports over the main file).
  write(conf.parent_path() / "conf.d/10-registry.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"" +
            o_.certs_dir + "\"\n",
        0644);
  write(conf, "version = 2\nimports = [\"conf.d/*.toml\"]\n", 0644);
  c = check_containerd_config(conf, o_.certs_dir);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->ok) << c->message;
  // A missing file is a failed check with the whole file to write.
  fs::remove(conf);
  c = check_containerd_config(conf, o_.certs_dir);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->message.find("does not exist"), std::string::npos);
  EXPECT_NE(c->message.find("version = 2\n"), std::string::npos);
  // Not TOML: an error naming the file and the line.
  write(conf, "version = 2\n[plugins\n", 0644);
  c = check_containerd_config(conf, o_.certs_dir);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("line 2"), std::string::npos) << c.error().message;
}

TEST(MirrorSetupConfig, RegistriesLoadAndBadOnesAreRefusedByKey) {
  peerd_config c;
  ASSERT_EQ(c.mirror.registries.size(), 1u);
  EXPECT_EQ(c.mirror.registries[0].host, "docker.io");
  auto st = config::load_string(
      "mirror: {registries: [{host: \"r.example:5000\", server: \"http://r.example:5000\", "
      "prefix: example}, {host: ghcr.io}]}\n",
      "peerd.yaml", c);
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_EQ(c.mirror.registries.size(), 2u);  // the file's list replaces the default
  EXPECT_EQ(c.mirror.registries[0].prefix, "example");
  // ghcr.io: server defaults to https://ghcr.io, prefix to the host.
  options o;
  o.containerd = true;
  o.crio = false;
  o.certs_dir = "/c";
  auto files = plan(c, o, [](std::string_view) {});
  ASSERT_TRUE(files);
  ASSERT_EQ(files->size(), 3u);
  EXPECT_NE((*files)[1].content.find("server = \"https://ghcr.io\""), std::string::npos);
  EXPECT_EQ((*files)[2].path, "/c/_default/hosts.toml");
  for (const char* bad : {"mirror: {registries: [{host: \"no host\"}]}",
                          "mirror: {registries: [{host: a.io, server: ftp://a.io}]}",
                          "mirror: {registries: [{host: a.io, prefix: \"A:1\"}]}"}) {
    peerd_config b;
    auto r = config::load_string(bad, "peerd.yaml", b);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message.find("mirror.registries[0]"), std::string::npos)
        << r.error().message;
  }
}

TEST(MirrorSetupToml, ReadsEveryFormOfTheKey) {
  const std::vector<std::string> want = {"plugins", "io.containerd.grpc.v1.cri", "registry",
                                         "config_path"};
  const char* forms[] = {
      "[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/d\"\n",
      "[plugins . 'io.containerd.grpc.v1.cri']\nregistry.config_path = '/d'\n",
      "[plugins]\n\"io.containerd.grpc.v1.cri\" = { registry = { config_path = \"\\u002fd\" } }\n",
      "x = \"\"\"\nconfig_path = \"/no\"\n\"\"\"\narr = [ 1, # c\n [2, 3], ]\n"
      "[plugins.\"io.containerd.grpc.v1.cri\".registry] # c\nconfig_path = \"/d\" # c\n",
  };
  for (const char* text : forms) {
    auto rows = parse_toml(text);
    ASSERT_TRUE(rows) << text << "\n" << rows.error().message;
    int hits = 0;
    for (const auto& r : *rows) {
      if (r.path == want) {
        EXPECT_EQ(r.value, "/d") << text;
        ++hits;
      }
    }
    EXPECT_EQ(hits, 1) << text;
  }
}

}  // namespace
}  // namespace shoal::peerd::mirror_setup
