#pragma once
// This machine's OCI platform, as image indexes name it ("linux/amd64", "linux/arm64"): what
// peerd announces in its heartbeats and what `shoalctl pull` asks for unless told otherwise.

#include <string>

namespace shoal::oci {

// "linux/<architecture>" with Go's architecture names (x86_64 → amd64, aarch64 → arm64, armv7l →
// arm, i686 → 386); an unknown machine keeps uname's name.
[[nodiscard]] std::string host_platform();

}  // namespace shoal::oci
