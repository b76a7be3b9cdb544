#pragma once
// Torrent metainfo for one content-addressed object: the schema registry-proxy serves and peerd
// consumes, derived deterministically from the object's bytes so any holder can regenerate it.
//
// The info dict is BitTorrent v1 (SHA-1 pieces), private, single file:
//   {length: <size>, name: "<64 hex of the sha256>", piece length: piece_size_for(size),
//    pieces: <20-byte SHA-1 per piece>, private: 1}
// Nothing else goes into the info dict, so the info-hash depends only on the bytes. Trackers live
// outside it ("announce", "announce-list") and can change without changing the swarm.
//
// SSL torrents (BitTorrent between cluster members, docs/security.md "BitTorrent between
// members"): with a cluster root set (set_metainfo_roots(), from the daemon's tls section when
// tls.enabled: the CA in tls.ca_file that issued tls.cert_file), the info dict also holds
//   ssl-cert: "<the CA certificate as PEM>"
// normalized by normalize_root_pem(): parsed and re-encoded by OpenSSL (one certificate,
// "-----BEGIN CERTIFICATE-----", base64 in 64-column lines, "\n" line ends, nothing else), so
// every party derives the same bytes and the same info-hash from the same CA whatever whitespace,
// comments or extra certificates its file has. The info-hash then depends on the bytes and the
// CA: a new CA (even a renewal of the same key) gives every object a new swarm. libtorrent makes
// such a torrent an SSL torrent: peers must present a certificate signed by that CA.
// During a CA rotation a party may have a swarm certificate from each CA (tls.swarm_extra_*):
// then it has two roots, the primary one (its tls.cert_file's issuer: what it builds metainfo
// in) first. parse() accepts a torrent only when its ssl-cert is exactly one of the party's
// roots (byte for byte, in canonical form) and, with no root set, only one without ssl-cert: a
// torrent rooted at another CA is refused with "rooted at another CA", an unrooted one with "not
// rooted at the cluster CA". Without a root the format is the one above, unchanged.
//
// Why v1: every node runs libtorrent 2.0.8, hybrid torrents hash twice and announce two swarms,
// v1 SHA-1 pieces are cheap to compute while the bytes stream in, and the sha256 of the whole
// object remains the final word on integrity (docs/p2p.md).

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/error.h"

namespace shoal {

using sha1_hash = std::array<std::uint8_t, 20>;

// The first certificate of a PEM text, re-encoded canonically (see above). An error when the text
// holds no parsable certificate.
[[nodiscard]] result<std::string> normalize_root_pem(std::string_view pem);
// Reads a PEM file (tls.ca_file) and normalizes its first certificate. Blocking file I/O.
[[nodiscard]] result<std::string> load_root_pem(const std::string& path);
// Every certificate of a PEM text (a CA bundle: tls.ca_file during a rotation), each normalized,
// in file order. An error when it holds none or one does not parse.
[[nodiscard]] result<std::vector<std::string>> normalize_root_bundle(std::string_view pem);
[[nodiscard]] result<std::vector<std::string>> load_root_bundle(const std::string& path);
// The index in `roots` (canonical PEMs) of the CA that signed the first certificate of
// `leaf_pem` (issuer name and signature both checked); an error saying so when none did.
[[nodiscard]] result<std::size_t> issuing_root(std::string_view leaf_pem,
                                               const std::vector<std::string>& roots);
// tls::certificate_fingerprint of a root (canonical PEM); empty when it does not parse.
[[nodiscard]] std::string root_fingerprint(std::string_view root_pem);
// The root in `roots` whose fingerprint is `fingerprint` (a caller's ca_fingerprint), or empty.
[[nodiscard]] std::string root_with_fingerprint(std::string_view fingerprint,
                                                const std::vector<std::string>& roots);

// The process-wide swarm roots every metainfo built or parsed from now on uses (canonical PEMs
// from normalize_root_pem(); none for plain torrents). roots[0] is the primary root: every
// builder uses it. parse() accepts any of them. Set once by a daemon's app at start, before any
// metainfo is built, like OpenSSL's own process-wide setup: every builder and parser in
// registry-proxy and peerd (blobs, datasets, chunks, the seeder, the swarm) must agree on them,
// and threading a CA through each of them would change every call site for one constant. The
// places that choose a root per torrent (registry-proxy's metainfo answer, the seeds of a second
// root) set object_metainfo::ssl_cert themselves. Tests set them around a case, or use the
// explicit-root parse overloads and the `ssl_cert` fields. Thread-safe.
void set_metainfo_roots(std::vector<std::string> canonical_pems);
// set_metainfo_roots({pem}), or no root at all for an empty `canonical_pem`.
void set_metainfo_root(std::string canonical_pem);
// The primary root (empty: plain torrents), and all of them (primary first).
[[nodiscard]] std::string metainfo_root();
[[nodiscard]] std::vector<std::string> metainfo_roots();

// The piece size rule: a power of two aiming at about 1024 pieces, at least 64 KiB, at most 4 MiB.
//   1 MiB → 64 KiB (16 pieces); 256 MiB → 256 KiB; 1 GiB → 1 MiB; 10 GiB → 4 MiB (2560 pieces).
// Small pieces start relaying sooner; the cap keeps per-piece overhead low for huge layers.
[[nodiscard]] std::uint32_t piece_size_for(std::uint64_t size);

struct object_metainfo {
  digest object;  // sha256 of the whole object
  std::uint64_t size = 0;
  std::uint32_t piece_size = 0;
  std::vector<sha1_hash> pieces;  // one per piece, the last one may be short
  // The info dict's ssl-cert (canonical PEM of the cluster CA), empty for a plain torrent.
  std::string ssl_cert = metainfo_root();

  [[nodiscard]] std::uint32_t piece_count() const {
    return static_cast<std::uint32_t>(pieces.size());
  }
  [[nodiscard]] std::uint64_t piece_offset(std::uint32_t i) const {
    return std::uint64_t{i} * piece_size;
  }
  [[nodiscard]] std::uint32_t piece_length(std::uint32_t i) const;
  // The bencoded info dict (canonical bytes) and its SHA-1: the swarm's identity.
  [[nodiscard]] std::string info_dict() const;
  [[nodiscard]] sha1_hash info_hash() const;
  [[nodiscard]] std::string info_hash_hex() const;
  // A complete .torrent: announce (first tracker), announce-list (one tier), info.
  [[nodiscard]] std::string torrent_file(const std::vector<std::string>& trackers) const;

  // Parses and validates a .torrent for `expected` (name must be its hex, private flag set,
  // piece size and count consistent with the rule and the length, ssl-cert exactly one of the
  // process roots or absent when there is none). The result's ssl_cert is the torrent's root.
  // Trackers are returned in `trackers_out` when given.
  [[nodiscard]] static result<object_metainfo> parse(
      std::string_view torrent, const digest& expected,
      std::vector<std::string>* trackers_out = nullptr);
  // The same against an explicit root (canonical PEM; empty: the torrent must be plain).
  [[nodiscard]] static result<object_metainfo> parse_rooted(
      std::string_view torrent, const digest& expected, std::string_view root,
      std::vector<std::string>* trackers_out = nullptr);
  // The same against any of `roots` (none: the torrent must be plain).
  [[nodiscard]] static result<object_metainfo> parse_any(
      std::string_view torrent, const digest& expected, const std::vector<std::string>& roots,
      std::vector<std::string>* trackers_out = nullptr);
};

// A pack: several small objects in one multi-file torrent, so a dataset of millions of small
// files does not mean millions of swarms. The info dict is
//   {files: [{length, path: ["<hh>", "<64 hex>"]}...], name: "sha256", piece length, pieces,
//    private: 1}
// with files sorted by digest and unique, so downloading into a directory D places each file at
// D/sha256/<hh>/<hex>: exactly the cache's object layout. The piece size follows
// piece_size_for(total bytes). With a cluster root the info dict also holds ssl-cert, as above.
struct pack_metainfo {
  std::vector<std::pair<digest, std::uint64_t>> files;  // sorted by digest, unique
  std::uint32_t piece_size = 0;
  std::vector<sha1_hash> pieces;
  std::string ssl_cert = metainfo_root();  // as object_metainfo::ssl_cert

  [[nodiscard]] std::uint64_t total_size() const;
  [[nodiscard]] std::string info_dict() const;
  [[nodiscard]] sha1_hash info_hash() const;
  [[nodiscard]] std::string info_hash_hex() const;
  [[nodiscard]] std::string torrent_file(const std::vector<std::string>& trackers) const;
  // Validates against the objects the pack must hold (any order; duplicates removed) and the
  // process roots (as object_metainfo::parse).
  [[nodiscard]] static result<pack_metainfo> parse(
      std::string_view torrent, std::vector<std::pair<digest, std::uint64_t>> expected);
  [[nodiscard]] static result<pack_metainfo> parse_rooted(
      std::string_view torrent, std::vector<std::pair<digest, std::uint64_t>> expected,
      std::string_view root);
};

// Sorts and deduplicates the objects of a pack (the order their bytes must be fed in).
[[nodiscard]] std::vector<std::pair<digest, std::uint64_t>> pack_order(
    std::vector<std::pair<digest, std::uint64_t>> files);
// Builds a pack's metainfo from its objects' bytes, read through `read(digest, offset, buf, n)`
// (returns bytes read, 0 at end, or an error) in pack order; verifies every object's sha256.
[[nodiscard]] result<pack_metainfo> build_pack(
    const std::vector<std::pair<digest, std::uint64_t>>& files,
    const std::function<result<std::size_t>(const digest&, std::uint64_t, char*, std::size_t)>&
        read);

// Computes piece hashes (SHA-1) and the object digest (SHA-256) as bytes stream in, in order.
class metainfo_builder {
 public:
  // With `hash_object` false the whole-object sha256 is not computed (the caller verifies the
  // digest elsewhere, e.g. a cache commit) and finish() checks only the length.
  explicit metainfo_builder(std::uint64_t size, bool hash_object = true);
  ~metainfo_builder();
  metainfo_builder(metainfo_builder&&) noexcept;
  metainfo_builder& operator=(metainfo_builder&&) noexcept;

  void update(const void* data, std::size_t n);
  [[nodiscard]] std::uint64_t bytes() const noexcept { return fed_; }
  // Checks the total length and that the bytes hash to `expected`.
  [[nodiscard]] result<object_metainfo> finish(const digest& expected);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::uint64_t size_ = 0;
  std::uint64_t fed_ = 0;
  bool hash_object_ = true;
};

// A metainfo_builder fed from one thread and run on another, so piece hashing does not slow the
// thread receiving the bytes (registry-proxy's upstream transfers). update() copies the chunk
// into a bounded queue (blocking when `max_queued` bytes wait); finish() drains it.
class async_metainfo_builder {
 public:
  async_metainfo_builder(std::uint64_t size, bool hash_object, std::size_t max_queued = 32u << 20);
  ~async_metainfo_builder();
  async_metainfo_builder(const async_metainfo_builder&) = delete;
  async_metainfo_builder& operator=(const async_metainfo_builder&) = delete;

  void update(const void* data, std::size_t n);
  [[nodiscard]] result<object_metainfo> finish(const digest& expected);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Builds metainfo for a file on disk (reads it once). Verifies it hashes to `expected`.
[[nodiscard]] result<object_metainfo> metainfo_for_file(const std::string& path,
                                                        const digest& expected);
[[nodiscard]] result<object_metainfo> metainfo_for_fd(int fd, std::uint64_t size,
                                                      const digest& expected);
[[nodiscard]] sha1_hash sha1_of(std::string_view data);
[[nodiscard]] std::string hex_of(const sha1_hash& h);

}  // namespace shoal
