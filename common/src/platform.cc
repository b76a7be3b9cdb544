#include "common/platform.h"

#include <sys/utsname.h>

#include <string_view>

namespace shoal::oci {

std::string host_platform() {
  struct utsname u {};
  std::string arch = "amd64";
  if (::uname(&u) == 0) {
    const std::string_view m = u.machine;
    if (m == "x86_64")
      arch = "amd64";
    else if (m == "aarch64" || m == "arm64")
      arch = "arm64";
    else if (m.starts_with("armv"))
      arch = "arm";
    else if (m == "i386" || m == "i686")
      arch = "386";
    else
      arch = m;  // ppc64le, s390x, riscv64 are already Go's names
  }
  return "linux/" + arch;
}

}  // namespace shoal::oci
