// Sealed views (store.h "dataset views", security review F19): link_sealed shares the object's
// inode with a view file and makes it immutable, so nothing written through the view reaches the
// cache; unlink_sealed removes the view and leaves the object an inode of its own with its bytes;
// eviction, scrub and start-up cope with a sealed object. Needs CAP_LINUX_IMMUTABLE and a
// filesystem with the flag (ext4, XFS, btrfs): skipped otherwise.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;

bool sealed(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  int flags = 0;
  bool r = fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL);
  if (fd >= 0) ::close(fd);
  return r;
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class CacheSeal : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = open_store(test_options(dir_.path()));
    views_ = dir_.path() + "/views";
    ASSERT_EQ(::mkdir(views_.c_str(), 0755), 0);
    content_ = random_bytes(300'000, 7);
    auto info = put(*s_, content_);
    ASSERT_TRUE(info) << info.error().to_string();
    id_ = info->id;
    auto st = s_->link_sealed(id_, views_ + "/probe");
    if (!st && st.error().code != make_error_code(errc::busy)) {
      GTEST_SKIP() << "cannot seal here: " << st.error().to_string();
    }
    ASSERT_TRUE(st) << st.error().to_string();
    ASSERT_TRUE(s_->unlink_sealed(views_ + "/probe", id_));
  }
  temp_dir dir_;
  std::unique_ptr<store> s_;
  std::string views_, content_;
  digest id_;
};

TEST_F(CacheSeal, ALinkSharesTheInodeAndNothingCanWriteIt) {
  std::string view = views_ + "/f";
  ASSERT_TRUE(s_->link_sealed(id_, view));
  EXPECT_EQ(stat_of(view).st_ino, stat_of(s_->object_path(id_)).st_ino);
  EXPECT_TRUE(sealed(view));
  // Root ignores 0444; the seal it does not.
  EXPECT_LT(::open(view.c_str(), O_WRONLY | O_CLOEXEC), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::truncate(view.c_str(), 0), 0);
  EXPECT_NE(::chmod(view.c_str(), 0644), 0);
  EXPECT_NE(::unlink(view.c_str()), 0);
  EXPECT_EQ(errno, EPERM);
  // One view per inode: a second one is refused (the caller copies).
  auto again = s_->link_sealed(id_, views_ + "/g");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, make_error_code(errc::busy));
  EXPECT_FALSE(std::filesystem::exists(views_ + "/g"));
  EXPECT_EQ(read_all(s_->object_path(id_)), content_);
  // An object that is not in the cache is not linked.
  auto absent = s_->link_sealed(sha256_of("absent"), views_ + "/h");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().code, make_error_code(errc::not_found));
}

TEST_F(CacheSeal, UnlinkLeavesTheObjectAnInodeOfItsOwn) {
  std::string view = views_ + "/f";
  ASSERT_TRUE(s_->link_sealed(id_, view));
  auto before = stat_of(s_->object_path(id_)).st_ino;
  auto st = s_->unlink_sealed(view, id_);
  ASSERT_TRUE(st) << st.error().to_string();
  EXPECT_FALSE(std::filesystem::exists(view));
  auto obj = stat_of(s_->object_path(id_));
  EXPECT_NE(obj.st_ino, before);
  EXPECT_EQ(obj.st_nlink, 1u);
  EXPECT_EQ(obj.st_mode & 0777, 0444u);
  EXPECT_FALSE(sealed(s_->object_path(id_)));
  EXPECT_EQ(read_all(s_->object_path(id_)), content_);
  EXPECT_TRUE(s_->contains(id_));
  ASSERT_TRUE(s_->verify(id_));
  // It can be linked into a view again, and an absent path is removed already.
  ASSERT_TRUE(s_->link_sealed(id_, view));
  ASSERT_TRUE(s_->unlink_sealed(view, id_));
  EXPECT_TRUE(s_->unlink_sealed(views_ + "/never-there", id_));
  // Nothing is left in tmp/.
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path() + "/tmp"));
}

TEST_F(CacheSeal, RemovalScrubAndRestartCopeWithASealedObject) {
  std::string view = views_ + "/f";
  ASSERT_TRUE(s_->link_sealed(id_, view));
  // A restart finds the sealed object with its row and keeps it.
  s_.reset();
  s_ = open_store(test_options(dir_.path()));
  ASSERT_TRUE(s_->contains(id_));
  EXPECT_EQ(s_->scrub_once().mismatches, 0u);
  // Removal (eviction's path) unlinks the cache's link; the view keeps the bytes and its seal.
  auto rm = s_->remove(id_);
  ASSERT_TRUE(rm) << rm.error().to_string();
  EXPECT_FALSE(std::filesystem::exists(s_->object_path(id_)));
  EXPECT_TRUE(sealed(view));
  EXPECT_EQ(read_all(view), content_);
  // The view is no longer the cache's: unlink_sealed lifts its seal and removes it.
  ASSERT_TRUE(s_->unlink_sealed(view, id_));
  EXPECT_FALSE(std::filesystem::exists(view));
}

}  // namespace
}  // namespace shoal::cache
