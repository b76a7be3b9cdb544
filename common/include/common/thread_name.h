#pragma once
// Thread names: what `top -H`, `ps -L`, /proc/<pid>/task/<tid>/comm, perf and gdb show for a
// thread, so an operator can tell which part of a daemon spends the CPU (docs/operations.md,
// "Threads"). The daemon's main thread keeps the process's name, which pgrep and ps match.

#include <cstddef>
#include <string>
#include <string_view>

#include <boost/asio/thread_pool.hpp>

namespace shoal {

// Names the calling thread. Linux keeps 15 bytes: a longer name is cut there. Never fails the
// caller (a name is a diagnostic).
void name_this_thread(std::string_view name) noexcept;

// The calling thread's name ("" when it cannot be read).
[[nodiscard]] std::string name_of_this_thread();

// An asio thread pool whose `threads` threads carry `name`: before any other work, each runs one
// naming task, held until all have run (at most a second) so that no thread takes two of them.
// The constructor returns at once.
class named_thread_pool : public boost::asio::thread_pool {
 public:
  named_thread_pool(std::size_t threads, std::string_view name);
};

}  // namespace shoal
