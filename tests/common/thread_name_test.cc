#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace shoal {
namespace {

// What `top -H` and `ps -L` read.
std::string comm_of_this_thread() {
  std::ifstream f("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

TEST(ThreadName, NamesTheCallingThreadOnly) {
  const std::string before = name_of_this_thread();
  std::string inside, comm;
  std::thread t([&] {
    name_this_thread("cache-io");
    inside = name_of_this_thread();
    comm = comm_of_this_thread();
  });
  t.join();
  EXPECT_EQ(inside, "cache-io");
  EXPECT_EQ(comm, "cache-io");
  EXPECT_EQ(name_of_this_thread(), before);  // the test's own thread keeps its name
}

TEST(ThreadName, LongNamesAreCutAtFifteenBytes) {
  std::string inside;
  std::thread t([&] {
    name_this_thread("a-name-longer-than-fifteen-bytes");
    inside = name_of_this_thread();
  });
  t.join();
  EXPECT_EQ(inside, "a-name-longer-t");
  EXPECT_EQ(inside.size(), 15u);
}

}  // namespace
}  // namespace shoal
