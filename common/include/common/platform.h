#pragma once
// This machine's OCI platform, as image indexes name it ("linux/amd64", "linux/arm64"): what
// peerd announces in its heartbeats and what `shoalctl pull` asks for unless told otherwise.

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace shoal::oci {

// "linux/<architecture>" with Go's architecture names (x86_64 → amd64, aarch64 → arm64, armv7l →
// arm, i686 → 386); an unknown machine keeps uname's name.
[[nodiscard]] std::string host_platform();

// The digest string of the manifest for `platform` ("os/arch" or "os/arch/variant") in the image
// index `index`, or "" when it lists none. An index is foreign input: an entry, a platform or a
// field of the wrong type is skipped, never thrown on. A platform asked without a variant takes
// the first entry of its os and architecture; with one, an entry's variant must match or be
// absent.
[[nodiscard]] std::string index_manifest_for(const nlohmann::json& index,
                                             std::string_view platform);

}  // namespace shoal::oci
