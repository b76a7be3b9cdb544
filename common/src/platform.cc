#include "common/platform.h"

#include <sys/utsname.h>

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_text.h"

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

std::string index_manifest_for(const nlohmann::json& index, std::string_view platform) {
  const auto slash = platform.find('/');
  const std::string_view os = platform.substr(0, slash);
  std::string_view arch = slash == std::string_view::npos ? "" : platform.substr(slash + 1);
  std::string_view variant;
  if (auto s2 = arch.find('/'); s2 != std::string_view::npos) {
    variant = arch.substr(s2 + 1);
    arch = arch.substr(0, s2);
  }
  if (!index.is_object()) return {};
  auto ms = index.find("manifests");
  if (ms == index.end() || !ms->is_array()) return {};
  for (const auto& m : *ms) {
    if (!m.is_object()) continue;
    auto p = m.find("platform");
    if (p == m.end() || !p->is_object()) continue;
    if (json_string(*p, "os") != os || json_string(*p, "architecture") != arch) continue;
    if (!variant.empty()) {
      auto v = json_string(*p, "variant");
      if (!v.empty() && v != variant) continue;
    }
    if (auto d = json_string(m, "digest"); !d.empty()) return d;
  }
  return {};
}

}  // namespace shoal::oci
