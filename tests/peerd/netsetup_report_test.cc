// netsetup's report as the heartbeat reads it (peerd/include/peerd/netsetup_report.h): read once
// and kept while the file is unchanged, read again after an edit in place or a rename, and a
// clear reason for a missing, oversized or non-object file.
#include "peerd/netsetup_report.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/file.h"
#include "common/heartbeat.h"
#include "test_util.h"

namespace shoal::peerd {
namespace {

namespace fs = std::filesystem;

class NetsetupReport : public ::testing::Test {
 protected:
  std::string path(const char* name) const { return dir_.path() + "/" + name; }
  static void write(const std::string& p, const std::string& text) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  testing::temp_dir dir_;
};

TEST_F(NetsetupReport, IsReadOnceWhileTheFileIsUnchanged) {
  const auto p = path("report.json");
  write(p, R"({"validation": {"passed": true}})");
  netsetup_report r(p);
  for (int i = 0; i < 5; ++i) {
    const auto& got = r.current();
    ASSERT_TRUE(got.ok) << got.reason;
    EXPECT_EQ(got.text, R"({"validation": {"passed": true}})");  // as written, not re-encoded
  }
  EXPECT_EQ(r.reads(), 1u);

  // Edited in place (the same inode, a new size and mtime): read again.
  write(p, R"({"validation": {"passed": false, "error": "PFC is off"}})");
  EXPECT_NE(r.current().text.find("PFC is off"), std::string::npos);
  EXPECT_EQ(r.reads(), 2u);

  // Replaced by a rename, as netsetup writes it: a new inode, read again.
  ASSERT_TRUE(write_atomic(p, R"({"validation": {"passed": true, "n": 8}})").has_value());
  EXPECT_NE(r.current().text.find("\"n\": 8"), std::string::npos);
  EXPECT_EQ(r.reads(), 3u);
  (void)r.current();
  EXPECT_EQ(r.reads(), 3u);
}

TEST_F(NetsetupReport, BadFilesGiveAReasonAndRecover) {
  const auto p = path("report.json");
  netsetup_report r(p);
  auto missing = r.current();
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.reason.find("netsetup report " + p + " cannot be read: No such file"),
            std::string::npos)
      << missing.reason;

  write(p, "[1, 2, 3]");
  auto array = r.current();
  EXPECT_FALSE(array.ok);
  EXPECT_NE(array.reason.find("is not a JSON object of at most 1 MiB"), std::string::npos)
      << array.reason;
  (void)r.current();
  EXPECT_EQ(r.reads(), 1u);  // a bad document is judged once too

  write(p, "{\"truncated\": ");
  EXPECT_FALSE(r.current().ok);

  // One byte over the bound: refused (its read stops there, not at the file's end).
  std::string big = "{\"pad\": \"" + std::string(heartbeat::max_document_bytes, 'x') + "\"}";
  write(p, big);
  auto over = r.current();
  EXPECT_FALSE(over.ok);
  EXPECT_NE(over.reason.find("at most 1 MiB"), std::string::npos) << over.reason;

  write(p, R"({"ok": true})");
  auto fixed = r.current();
  ASSERT_TRUE(fixed.ok) << fixed.reason;
  EXPECT_EQ(fixed.text, R"({"ok": true})");

  fs::remove(p);
  EXPECT_FALSE(r.current().ok);  // gone again: not the kept document
}

}  // namespace
}  // namespace shoal::peerd
