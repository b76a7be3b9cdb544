#include "registry-proxy/credential_gate.h"

#include <algorithm>

namespace shoal::proxy {

credential_gate::credential_gate(credential_gate_limits l)
    : lim_(l), clients_(l.table_entries), accepted_(l.table_entries) {
  global_.tokens = lim_.global_burst;
  global_.at = clock::now();
}

bool credential_gate::take(bucket& b, double rate, double burst, clock::time_point now) {
  double elapsed = std::chrono::duration<double>(now - b.at).count();
  if (elapsed > 0) {
    b.tokens = std::min(burst, b.tokens + elapsed * rate);
    b.at = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

result<credential_gate::pass> credential_gate::admit(const std::string& client,
                                                     const std::string& cred_hash,
                                                     clock::time_point now) {
  std::lock_guard lk(mu_);
  if (auto* until = accepted_.find(cred_hash); until && *until > now) return pass{};
  if (running_ >= lim_.max_concurrent) {
    ++refused_;
    return fail(errc::busy, "too many upstream checks of unseen credentials running; retry later");
  }
  bucket* b = clients_.find(client);
  if (!b) b = &clients_.put(client, bucket{lim_.per_client_burst, now});
  // Peek both before taking either: a refusal must not spend the other bucket's token.
  bucket cb = *b, gb = global_;
  if (!take(cb, lim_.per_client_rate, lim_.per_client_burst, now)) {
    ++refused_;
    return fail(errc::busy, "too many unseen credentials from this client; retry later");
  }
  if (!take(gb, lim_.global_rate, lim_.global_burst, now)) {
    ++refused_;
    return fail(errc::busy, "too many unseen credentials from all clients; retry later");
  }
  *b = cb;
  global_ = gb;
  ++running_;
  return pass{this};
}

void credential_gate::release() {
  std::lock_guard lk(mu_);
  if (running_) --running_;
}

void credential_gate::note_accepted(const std::string& cred_hash, clock::time_point now) {
  std::lock_guard lk(mu_);
  accepted_.put(cred_hash, now + lim_.accepted_ttl);
}

std::uint64_t credential_gate::refused() const {
  std::lock_guard lk(mu_);
  return refused_;
}

}  // namespace shoal::proxy
