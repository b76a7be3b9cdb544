#pragma once
// The libtorrent session as Shoal runs it, shared by registry-proxy (the origin seed) and peerd:
// the LAN tuning table (research/libtorrent.md), adding a verified object as a seed without
// rehashing, tracker URLs that carry the node's identity, and an alert pump thread.
//
// libtorrent 2.0.8 specifics handled here: torrents are added neither auto-managed nor paused
// (otherwise the 4th download silently queues), uTP is off (slow on LAN, and preferred for
// outgoing connections by default), DHT/LSD/UPnP/NAT-PMP off, encryption off, the alert
// categories we use are enabled (the default mask is errors only), min_announce_interval is
// lowered so the tracker's short interval is honoured.
//
// Threading: lt::session's API is thread-safe; alert callbacks run on the pump thread.
//
// SSL (settings::ssl, docs/security.md "BitTorrent between members"): every torrent is then an
// SSL torrent (metainfo.h: ssl-cert = the cluster CA). The session listens on SSL sockets only
// (each listen entry gets libtorrent's "s" suffix; the plain port is not opened: libtorrent
// refuses plaintext peers of SSL torrents anyway, and a plain listener would only answer
// strangers). Each SSL torrent is given this party's certificate and key (and the RFC 7919
// ffdhe2048 DH group, built in) when it is added through add_seed()/add_pack_seed() and on every
// torrent_need_cert_alert (torrents added through raw()), before the alert reaches on_alert's
// callback. During a CA rotation the session holds one pair per root (settings::extra_certs,
// settings::roots): a torrent gets the pair whose leaf its ssl-cert root issued, so one session
// serves the swarms of both CAs on one port (the SNI, the info-hash, picks the torrent); a
// torrent rooted where no pair is from gets the primary pair. The pump thread stats every pair's
// certificate and key files every reload_interval; when either changed (inode, size, mtime,
// ctime: an atomic rename and Kubernetes' symlink swap are both seen) and the pair loads and
// matches, every loaded torrent of its root gets the new pair (connections made afterwards use
// it; open ones keep theirs), else the old pair stays and the failure is logged once per change.
// Refused peers are retried after min_reconnect_time (2 s) × failcount, so a renewed peer is
// dialled again within seconds. Trackers are announced over HTTPS with the torrent's context when
// their URL is https (the node presents its certificate; the tracker's is verified against the
// torrent's CA and its host name).

#include <libtorrent/session.hpp>
#include <libtorrent/torrent_handle.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/file.h"
#include "common/metrics.h"
#include "common/tls.h"
#include "swarm/grants.h"
#include "swarm/metainfo.h"

namespace shoal::swarm {

struct settings {
  std::string listen = "0.0.0.0:6881";  // host:port; pin it to the data-plane address
  int connections_limit = 4000;
  std::uint64_t upload_rate_limit = 0;    // bytes/s, 0 unlimited
  std::uint64_t download_rate_limit = 0;  // bytes/s, 0 unlimited
  // Several daemons on one host (tests, the demo) share an IP.
  bool allow_multiple_connections_per_ip = true;
  int min_announce_interval_s = 5;
  int peer_connect_timeout_s = 3;
  int max_queued_disk_bytes = 64 << 20;
  int send_buffer_watermark = 8 << 20;
  int aio_threads = 2;  // disk and hash jobs; fewer threads, fewer wake-ups (docs/p2p.md)
  // libtorrent's own pool for piece hashing (its default 1); 0 runs hash jobs on the aio_threads,
  // one thread and one hand-off per piece fewer (measured in bench/peerd/run, docs/p2p.md).
  int hashing_threads = 0;
  // Close connections on which neither side wants anything (seed to seed, or an "upload only"
  // peer we are not interested in). peerd turns it off: a super-seeding origin looks like an
  // uninteresting upload-only peer until its first offer arrives (swarm.h, node_superseed_plugin).
  bool close_redundant_connections = true;
  std::string user_agent = "shoal/0.1";
  // The 8-character peer-id prefix. Origins use "-SO0100-", nodes "-SN0100-", so a node can tell
  // which bytes came from registry-proxy whatever address or port the connection used.
  std::string peer_fingerprint = "-SN0100-";
  // BitTorrent between members (see above): SSL listen sockets only, and this party's
  // certificate (signed directly by the cluster CA, DNS SAN `*`, serverAuth and clientAuth) on
  // every SSL torrent. The files are the daemon's tls section's.
  bool ssl = false;
  std::string cert_file;  // PEM: the leaf first (only it is sent to peers)
  std::string key_file;   // PEM, unencrypted
  // Further pairs, each from another root (tls.swarm_extra_cert_file/_key_file during a CA
  // rotation).
  struct cert_files {
    std::string cert_file, key_file;
  };
  std::vector<cert_files> extra_certs;
  // The CAs the pairs may be from (canonical PEMs, metainfo.h), the primary root first: each
  // pair serves the torrents rooted at its leaf's issuer. Empty: the one pair serves every SSL
  // torrent, whatever its root.
  std::vector<std::string> roots;
  std::chrono::milliseconds reload_interval{5000};  // 0: never re-read
  // With ssl: pieces go only to connections presenting registry-proxy's grant for the swarm
  // (swarm/grants.h), checked against ca_file (the daemon's tls.ca_file).
  bool require_grants = true;
  std::string ca_file;
  // Raw settings_pack overrides by libtorrent's own key names ("predictive_piece_announce":
  // "20"), applied after the table. An escape hatch for tuning and benchmarks: the table is what
  // Shoal is measured with (docs/p2p.md); an unknown key or a bad value fails the start.
  std::map<std::string, std::string> libtorrent;
};

inline constexpr std::string_view origin_fingerprint = "-SO0100-";
inline constexpr std::string_view node_fingerprint = "-SN0100-";
// An origin that super-seeds, and a node that understands it (see origin_superseed_plugin).
inline constexpr std::string_view superseeding_origin_fingerprint = "-SO0110-";
inline constexpr std::string_view superseed_node_fingerprint = "-SN0110-";

// BitTorrent between members for a daemon whose `tls` section is `tls`. enable_members_only()
// sets the process's metainfo roots (metainfo.h), or clears them when TLS is off; a daemon's app
// calls it once at start, before anything builds or parses metainfo. The primary root is the CA
// in tls.ca_file that issued tls.cert_file (a one-certificate ca_file: that certificate, as
// before); with tls.swarm_extra_cert_file the CA that issued it is the second root (it must be
// another CA of ca_file). apply_tls() turns `s` into an SSL session with the daemon's
// certificate pairs and those roots (enable_members_only() first).
[[nodiscard]] status enable_members_only(const tls::tls_config& tls);
void apply_tls(settings& s, const tls::tls_config& tls);

// The settings_pack Shoal uses, from the table above (documented in docs/p2p.md), without the
// raw overrides.
[[nodiscard]] lt::settings_pack lan_settings(const settings& s);

// Applies `overrides` (libtorrent key → value) to `p`. Booleans take true/false/1/0, integers
// decimal numbers; an unknown key or an unparsable value is an error naming it.
[[nodiscard]] status apply_overrides(lt::settings_pack& p,
                                     const std::map<std::string, std::string>& overrides);

// Shoal super seeding (BEP 16 semantics between Shoal's own daemons). The origin offers every
// node a few pieces at a time with HAVE messages, preferring pieces no peer holds and nobody was
// offered, and one more each time the node reports an offered piece complete; so the origin sends
// each piece once before it sends any twice, and nodes spread the rest among themselves.
// libtorrent's built-in super seeding (torrent_flags::super_seeding) is not used: in 2.0.8 its
// first two offers are dropped on incoming connections (peer_connection::superseed_piece returns
// early during the handshake), and measured here the peers then idled 5 s until peerd's HTTP
// fallback. Both plugins run on libtorrent's network thread.
//
// Origin side: torrents added with session::add_seed, or with superseed_userdata() by hand, carry
// their piece count for the plugin; a peer is offered pieces only if its peer id starts with
// superseed_node_fingerprint (it ignores our have-all); anyone else sees a plain seed. The plugin
// also puts `superseed_handshake_key: 1` into the extension handshake of every connection of such
// a torrent, which libtorrent sends before the bitfield: that is how a node tells a super-seeding
// peer whose peer id is a node's (peerd seeding the checkpoint it published) from a plain seed,
// per torrent. registry-proxy's peer id (superseeding_origin_fingerprint) says it for every
// torrent.
// `in_order`: among equally good pieces offer the lowest index first, so the swarm holds a growing
// prefix of the object and peers streaming it in order are served as it arrives.
// `max_in_flight`: offers outstanding on all connections of a torrent together (a node beyond it
// gets its first offer when one is taken up or expires; until then it trades with the nodes).
// `counters` (optional): what the plugin did, summed over its torrents, for a daemon's metrics.
inline constexpr int superseed_max_in_flight_default = 64;
struct superseed_counters {
  // Offers made of a piece no connected node held or had on offer, and of one some node did
  // (a second copy, only to a node that got nothing from the other nodes for a while).
  std::atomic<std::uint64_t> offers_first{0};
  std::atomic<std::uint64_t> offers_second{0};
  // Offers dropped because the node did not ask for them in time, and offers it asked for that
  // still had not arrived after the longer bound (their piece may then be offered elsewhere).
  std::atomic<std::uint64_t> offers_expired{0};
  std::atomic<std::uint64_t> offers_expired_requested{0};
  // Payload sent more than once per piece: to the same node again (it asked twice for a block,
  // as libtorrent does after a request times out) and to another node (a second copy).
  std::atomic<std::uint64_t> repeat_bytes_same_node{0};
  std::atomic<std::uint64_t> repeat_bytes_other_node{0};
};
[[nodiscard]] std::shared_ptr<lt::plugin> origin_superseed_plugin(
    int offers_per_peer, bool in_order, int max_in_flight = superseed_max_in_flight_default,
    std::shared_ptr<superseed_counters> counters = nullptr);
// add_torrent_params::userdata that makes origin_superseed_plugin super-seed a torrent of
// `pieces` pieces (1 .. 2^24). A session with the plugin must give every torrent it seeds under
// superseeding_origin_fingerprint this tag; under a node's peer id only the torrents it tags are
// super-seeded (and announced so in the extension handshake).
[[nodiscard]] lt::client_data_t superseed_userdata(int pieces);
inline constexpr const char* superseed_handshake_key = "shoal_superseed";
// Node side: ignores the bitfield (have-all) of peers whose id starts with
// superseeding_origin_fingerprint, or whose extension handshake carries superseed_handshake_key.
// The node's peer id must start with superseed_node_fingerprint. `on_block` (optional) is called
// for every block received from a peer, on the network thread: the torrent, whether registry-proxy
// sent it, and its size. Much cheaper than libtorrent's per-block alerts (an allocation and a
// thread hand-off each).
using block_callback =
    std::function<void(const lt::torrent_handle&, bool from_origin, std::size_t bytes)>;
[[nodiscard]] std::shared_ptr<lt::plugin> node_superseed_plugin(block_callback on_block = {});
// Whether a peer id is registry-proxy's (either origin fingerprint).
[[nodiscard]] bool is_origin(const lt::peer_id& pid);
// Whether a seeding torrent still serves someone: a connected peer, other than registry-proxy,
// that is not a seed. Connections between seeds stay open (close_redundant_connections is off
// for super seeding), so "has peers" is not "in use". A sync call: never on the network thread.
[[nodiscard]] bool serving_a_peer(const lt::torrent_handle& h);
// Every torrent of `ses` that serves someone (serving_a_peer's rule), sorted (binary_search it):
// one status call for all torrents, then the peer lists of only those with a non-seed peer
// connected. A node sweeping its few hundred loaded seeds every few seconds made one sync call
// into the network thread per seed. A sync call: never on the network thread.
[[nodiscard]] std::vector<lt::torrent_handle> serving_peers(lt::session& ses);

// For a seed-mode torrent of bytes this process has just verified: every piece marked verified
// and held, so libtorrent does not hash a piece again before its first upload. Needs p.ti.
void trust_all_pieces(lt::add_torrent_params& p);

// "<announce>?node=n1&zone=z&rack=r&role=peer" (or with '&' when the URL already has a query).
[[nodiscard]] std::string tracker_url(const std::string& announce, const std::string& node,
                                      const std::string& zone, const std::string& rack,
                                      const std::string& role);

// 20 raw bytes → "0123..." hex, and back.
[[nodiscard]] std::string hash_hex(const lt::sha1_hash& h);
// The v1 info-hash of a torrent, the same way.
[[nodiscard]] inline std::string hash_hex(const lt::torrent_handle& h) {
  return hash_hex(h.info_hashes().v1);
}

class session;
// With SSL on: <prefix>_swarm_tls_reloads_total and <prefix>_swarm_tls_reload_failures_total
// (the swarm's certificate re-read from disk and installed on every torrent, or refused and the
// previous one kept), and with grants required <prefix>_swarm_grants_accepted_total and
// <prefix>_swarm_grant_refusals_total (connections whose grant verified; connections refused
// pieces for want of one). The expiry gauge comes from the daemon's tls_context, which watches the
// same files. Nothing without SSL. `s` must outlive `reg`'s scrapes.
void register_tls_metrics(metrics::registry& reg, const session& s, std::string_view prefix);

class session {
 public:
  [[nodiscard]] static result<std::unique_ptr<session>> start(const settings& s);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  [[nodiscard]] lt::session& raw() { return *ses_; }
  [[nodiscard]] const lt::session& raw() const { return *ses_; }
  // The port actually bound (useful with port 0 in tests), the SSL one when ssl is on; 0 when not
  // listening.
  [[nodiscard]] std::uint16_t listen_port() const;
  [[nodiscard]] bool ssl() const { return ssl_; }

  // Gives an SSL torrent this party's current certificate for the torrent's root (no-op for a
  // plain torrent or without ssl). Done by add_torrent(), add_seed(), add_pack_seed() and on
  // torrent_need_cert_alert. `root`: the torrent's ssl-cert when the caller has it at hand (else
  // it is read from the torrent, a round trip to the network thread).
  void set_certificate(const lt::torrent_handle& h);
  void set_certificate(const lt::torrent_handle& h, std::string_view root);
  // The roots this session holds a certificate pair for (canonical PEMs, the primary first):
  // the swarms it can seed and join. Empty without ssl or without settings::roots.
  [[nodiscard]] std::vector<std::string> roots() const;
  // The root among roots() a client certificate chained to (its tls::peer_identity
  // ca_fingerprint), or empty when none.
  [[nodiscard]] std::string root_for_ca(std::string_view ca_fingerprint) const;
  // lt::session::add_torrent, and for an SSL session the torrent is held paused until it has
  // this party's certificate: otherwise its first announce and its first connections (to the
  // peers in `p`, to the tracker's answer) go out before the pump thread handles
  // torrent_need_cert_alert, fail the handshake without a certificate, and libtorrent backs off
  // from that tracker and those peers (min_reconnect_time × failcount, 60 s by default) while the
  // node pulls from registry-proxy instead. Every torrent peerd and registry-proxy add goes
  // through here. A torrent the caller asked to be paused stays paused.
  [[nodiscard]] lt::torrent_handle add_torrent(lt::add_torrent_params p, lt::error_code& ec);
  // Re-reads each certificate pair now when its files changed: true when a new pair was
  // installed on every loaded torrent of its root, false when nothing changed, an error when new
  // files do not load (that old pair stays; the others are still reloaded). The pump calls it every
  // reload_interval. Blocking file I/O.
  [[nodiscard]] result<bool> reload_certificate_if_changed();
  struct tls_counters {
    std::uint64_t reloads = 0;          // certificate pairs installed after the first
    std::uint64_t reload_failures = 0;  // changed files that did not load
  };
  [[nodiscard]] tls_counters tls_stats() const;

  // Grants (settings::require_grants with ssl): whether they are checked, the grant this party
  // sends for `swarm` from now on (registry-proxy's, from a metainfo answer; see grants.h), and
  // the counters. set_grant() is a no-op when grants are off.
  [[nodiscard]] bool grants_required() const { return grants_ != nullptr; }
  void set_grant(const lt::sha1_hash& swarm, std::string grant,
                 std::chrono::system_clock::time_point expires);
  [[nodiscard]] const grant_counters* grant_stats() const { return grant_counters_.get(); }

  // Adds a complete, verified object as a seed: seed_mode with every piece marked verified, so
  // nothing is rehashed. `save_path` is the directory holding the file named <hex digest>.
  // Adding a torrent that is already loaded fails with errc::already_exists.
  // The torrent carries its piece count for origin_superseed_plugin().
  [[nodiscard]] result<lt::torrent_handle> add_seed(const object_metainfo& m,
                                                    const std::string& save_path,
                                                    const std::vector<std::string>& trackers);
  void remove(const lt::torrent_handle& h);

  // Adds a complete, verified pack (several objects in one multi-file torrent, dataset packs) as
  // a seed, the same way as add_seed(): every member must already be verified at
  // `<objects_dir>/sha256/<hh>/<hex>`, where `objects_dir` is the cache's objects directory
  // (the pack's file layout is the cache's object layout, so nothing is copied).
  [[nodiscard]] result<lt::torrent_handle> add_pack_seed(const pack_metainfo& m,
                                                         const std::string& objects_dir,
                                                         const std::vector<std::string>& trackers);

  // Called on the pump thread for every alert (after the built-in error logging).
  void on_alert(std::function<void(lt::alert*)> cb);
  void stop();

 private:
  [[nodiscard]] result<lt::torrent_handle> add_verified_seed(const std::string& torrent,
                                                             const std::string& save_path,
                                                             const std::string& name);
  session() = default;
  void pump();
  struct cert_pair {
    std::string cert, key;
    std::string root;  // the canonical PEM of the root that issued `cert`; empty: any torrent
  };
  // One configured pair of files and what was loaded from them.
  struct cert_slot {
    std::string cert_file, key_file;
    std::shared_ptr<const cert_pair> pair;  // guarded by cert_mu_
    std::array<file_stamp, 2> stamp{};      // the stamps `pair` (or a failed load) came from
  };
  // Loads and checks (a certificate, a key that matches it, issued by one of roots_) a slot's
  // files.
  [[nodiscard]] result<cert_pair> load_certificate(const cert_slot& slot) const;
  [[nodiscard]] static std::array<file_stamp, 2> file_stamps(const cert_slot& slot);
  // The pair for torrents rooted at `root`: the one its root issued, else the primary one.
  [[nodiscard]] std::shared_ptr<const cert_pair> pair_for(std::string_view root) const;

  bool ssl_ = false;
  std::vector<std::string> roots_;  // settings::roots
  std::chrono::milliseconds reload_interval_{0};
  mutable std::mutex cert_mu_;
  std::vector<cert_slot> slots_;  // [0] the primary pair; the vector itself never changes
  tls_counters tls_stats_;        // guarded by cert_mu_

  std::shared_ptr<grant_book> grants_;  // null: grants are not required
  std::shared_ptr<grant_counters> grant_counters_;

  std::unique_ptr<lt::session> ses_;
  std::thread pump_;
  std::atomic<bool> stop_{false};
  bool trace_ = false;
  std::function<void(lt::alert*)> cb_;
  std::mutex cb_mu_;
};

}  // namespace shoal::swarm
