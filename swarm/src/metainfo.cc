#include "swarm/metainfo.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/bencode.h"
#include "common/fd.h"
#include "common/sha256.h"
#include "common/thread_name.h"
#include "common/tls.h"

namespace shoal {
namespace {

struct md_ctx {
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  explicit md_ctx(const EVP_MD* md) { EVP_DigestInit_ex(c, md, nullptr); }
  ~md_ctx() { EVP_MD_CTX_free(c); }
  md_ctx(const md_ctx&) = delete;
  md_ctx& operator=(const md_ctx&) = delete;
};

// A .torrent around a canonical info dict, encoded by hand so the info bytes are exactly
// `info` (the info-hash is computed over them). Keys in sorted order: announce, announce-list,
// created by, info.
std::string torrent_around(const std::string& info, const std::vector<std::string>& trackers) {
  bencode::dict outer;
  if (!trackers.empty()) {
    outer["announce"] = trackers.front();
    bencode::list tier;
    for (const auto& t : trackers) tier.emplace_back(t);
    outer["announce-list"] = bencode::list{bencode::value(std::move(tier))};
  }
  outer["created by"] = "shoal";
  std::string out = "d";
  for (const auto& [k, v] : outer) out += std::to_string(k.size()) + ":" + k + bencode::encode(v);
  out += "4:info" + info + "e";
  return out;
}

std::mutex root_mu;
std::vector<std::string> root_pems;  // guarded by root_mu; [0] the primary root

// The root among `roots` a torrent's info dict names (its ssl-cert, exactly), else the primary
// one (so the error says what is off against it); empty without roots.
std::string_view pick_root(std::string_view torrent, const std::vector<std::string>& roots) {
  if (roots.empty()) return {};
  if (roots.size() == 1) return roots.front();
  bencode::limits lim;
  lim.max_depth = 8;
  lim.max_items = 8u << 20;
  auto top = bencode::decode(torrent, lim);
  if (top) {
    if (const auto* info = top->find("info"); info && info->is_dict()) {
      if (const auto* sc = info->find("ssl-cert"); sc && sc->is_string()) {
        for (const auto& r : roots) {
          if (sc->as_string() == r) return r;
        }
      }
    }
  }
  return roots.front();
}

using x509_ptr = std::unique_ptr<X509, decltype(&X509_free)>;

x509_ptr first_certificate(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> in(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  return x509_ptr(in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr,
                  &X509_free);
}

// The ssl-cert check both parsers share: the torrent's must be exactly `root` (or absent when
// `root` is empty). The message says which side is off.
std::optional<std::string> root_problem(const bencode::value& info, std::string_view root) {
  const auto* sc = info.find("ssl-cert");
  if (!sc) {
    if (root.empty()) return std::nullopt;
    return "not rooted at the cluster CA (no ssl-cert; BitTorrent between members needs one)";
  }
  if (!sc->is_string()) return "bad ssl-cert";
  if (root.empty())
    return "rooted at a CA (ssl-cert), but this daemon runs without TLS (tls.enabled: false)";
  if (sc->as_string() != root) {
    auto norm = normalize_root_pem(sc->as_string());
    if (norm && *norm == root) return "ssl-cert is the cluster CA but not in canonical form";
    return "rooted at another CA (its ssl-cert is not the cluster CA in tls.ca_file)";
  }
  return std::nullopt;
}

}  // namespace

result<std::string> normalize_root_pem(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> in(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!in) return fail(errc::internal, "cluster CA: out of memory");
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) return fail(errc::invalid_argument, "cluster CA: no PEM certificate found");
  std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
  if (!out || PEM_write_bio_X509(out.get(), cert.get()) != 1)
    return fail(errc::internal, "cluster CA: cannot re-encode the certificate");
  char* data = nullptr;
  long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

result<std::string> load_root_pem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail_errno(errno, "open cluster CA " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  auto r = normalize_root_pem(ss.str());
  if (!r) return fail(r.error().wrap(path));
  return r;
}

result<std::vector<std::string>> normalize_root_bundle(std::string_view pem) {
  static constexpr std::string_view begin = "-----BEGIN CERTIFICATE-----";
  std::vector<std::string> out;
  for (auto at = pem.find(begin); at != std::string_view::npos; at = pem.find(begin, at + 1)) {
    auto one = normalize_root_pem(pem.substr(at));
    if (!one) return fail(one.error().wrap("certificate " + std::to_string(out.size() + 1)));
    out.push_back(std::move(*one));
  }
  if (out.empty()) return fail(errc::invalid_argument, "cluster CA: no PEM certificate found");
  return out;
}

result<std::vector<std::string>> load_root_bundle(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail_errno(errno, "open cluster CA " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  auto r = normalize_root_bundle(ss.str());
  if (!r) return fail(r.error().wrap(path));
  return r;
}

result<std::size_t> issuing_root(std::string_view leaf_pem, const std::vector<std::string>& roots) {
  auto leaf = first_certificate(leaf_pem);
  if (!leaf) return fail(errc::invalid_argument, "no certificate");
  for (std::size_t i = 0; i < roots.size(); ++i) {
    auto ca = first_certificate(roots[i]);
    if (!ca || X509_check_issued(ca.get(), leaf.get()) != X509_V_OK) continue;
    EVP_PKEY* key = X509_get0_pubkey(ca.get());
    if (key != nullptr && X509_verify(leaf.get(), key) == 1) return i;
  }
  return fail(errc::not_found, "not signed by any of the " + std::to_string(roots.size()) +
                                   " CA certificates given");
}

std::string root_fingerprint(std::string_view root_pem) {
  auto ca = first_certificate(root_pem);
  return ca ? tls::certificate_fingerprint(ca.get()) : std::string();
}

std::string root_with_fingerprint(std::string_view fingerprint,
                                  const std::vector<std::string>& roots) {
  if (fingerprint.empty()) return {};
  for (const auto& r : roots) {
    if (root_fingerprint(r) == fingerprint) return r;
  }
  return {};
}

void set_metainfo_roots(std::vector<std::string> canonical_pems) {
  std::erase(canonical_pems, std::string());
  std::lock_guard lk(root_mu);
  root_pems = std::move(canonical_pems);
}

void set_metainfo_root(std::string canonical_pem) {
  std::vector<std::string> r;
  if (!canonical_pem.empty()) r.push_back(std::move(canonical_pem));
  set_metainfo_roots(std::move(r));
}

std::string metainfo_root() {
  std::lock_guard lk(root_mu);
  return root_pems.empty() ? std::string() : root_pems.front();
}

std::vector<std::string> metainfo_roots() {
  std::lock_guard lk(root_mu);
  return root_pems;
}

std::uint32_t piece_size_for(std::uint64_t size) {
  constexpr std::uint64_t min_piece = 64 * 1024;
  constexpr std::uint64_t max_piece = 4 * 1024 * 1024;
  std::uint64_t target = size / 1024;
  std::uint64_t p = min_piece;
  while (p < target && p < max_piece) p <<= 1;
  return static_cast<std::uint32_t>(p);
}

sha1_hash sha1_of(std::string_view data) {
  sha1_hash h{};
  unsigned int len = 0;
  md_ctx ctx(EVP_sha1());
  EVP_DigestUpdate(ctx.c, data.data(), data.size());
  EVP_DigestFinal_ex(ctx.c, h.data(), &len);
  return h;
}

std::string hex_of(const sha1_hash& h) { return to_hex(h); }

std::uint32_t object_metainfo::piece_length(std::uint32_t i) const {
  std::uint64_t off = piece_offset(i);
  if (off >= size) return 0;
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(piece_size, size - off));
}

std::string object_metainfo::info_dict() const {
  std::string pieces_str;
  pieces_str.reserve(pieces.size() * 20);
  for (const auto& p : pieces) pieces_str.append(reinterpret_cast<const char*>(p.data()), p.size());
  bencode::dict info;
  info["length"] = static_cast<std::int64_t>(size);
  info["name"] = object.hex();
  info["piece length"] = static_cast<std::int64_t>(piece_size);
  info["pieces"] = std::move(pieces_str);
  info["private"] = 1;
  if (!ssl_cert.empty()) info["ssl-cert"] = ssl_cert;
  return bencode::encode(bencode::value(std::move(info)));
}

sha1_hash object_metainfo::info_hash() const { return sha1_of(info_dict()); }
std::string object_metainfo::info_hash_hex() const { return hex_of(info_hash()); }

std::string object_metainfo::torrent_file(const std::vector<std::string>& trackers) const {
  return torrent_around(info_dict(), trackers);
}

result<object_metainfo> object_metainfo::parse(std::string_view torrent, const digest& expected,
                                               std::vector<std::string>* trackers_out) {
  return parse_any(torrent, expected, metainfo_roots(), trackers_out);
}

result<object_metainfo> object_metainfo::parse_any(std::string_view torrent, const digest& expected,
                                                   const std::vector<std::string>& roots,
                                                   std::vector<std::string>* trackers_out) {
  return parse_rooted(torrent, expected, pick_root(torrent, roots), trackers_out);
}

result<object_metainfo> object_metainfo::parse_rooted(std::string_view torrent,
                                                      const digest& expected, std::string_view ca,
                                                      std::vector<std::string>* trackers_out) {
  bencode::limits lim;
  lim.max_depth = 8;
  lim.max_items = 4096;
  auto root = bencode::decode(torrent, lim);
  if (!root) return fail(root.error().wrap("metainfo for " + expected.short_str()));
  auto bad = [&](const std::string& why) {
    return fail(errc::protocol_error, "metainfo for " + expected.short_str() + ": " + why);
  };
  const auto* info = root->find("info");
  if (!info || !info->is_dict()) return bad("no info dict");
  const auto* len = info->find("length");
  const auto* name = info->find("name");
  const auto* plen = info->find("piece length");
  const auto* pieces = info->find("pieces");
  const auto* priv = info->find("private");
  if (!len || !len->is_int() || len->as_int() < 0) return bad("missing or bad length");
  if (!name || !name->is_string() || name->as_string() != expected.hex())
    return bad("name is not the object's digest");
  if (!plen || !plen->is_int()) return bad("missing piece length");
  if (!pieces || !pieces->is_string() || pieces->as_string().size() % 20 != 0)
    return bad("bad pieces");
  if (!priv || !priv->is_int() || priv->as_int() != 1) return bad("torrent is not private");
  if (auto why = root_problem(*info, ca)) return bad(*why);
  if (info->as_dict().size() != (ca.empty() ? 5u : 6u))
    return bad("unexpected keys in the info dict");
  object_metainfo m;
  m.object = expected;
  m.ssl_cert = std::string(ca);
  m.size = static_cast<std::uint64_t>(len->as_int());
  if (static_cast<std::uint64_t>(plen->as_int()) != piece_size_for(m.size))
    return bad("piece length does not follow the rule");
  m.piece_size = static_cast<std::uint32_t>(plen->as_int());
  std::uint64_t want = m.size == 0 ? 0 : (m.size + m.piece_size - 1) / m.piece_size;
  const auto& ps = pieces->as_string();
  if (ps.size() / 20 != want) return bad("piece count does not match the length");
  m.pieces.resize(static_cast<std::size_t>(want));
  for (std::size_t i = 0; i < m.pieces.size(); ++i)
    std::memcpy(m.pieces[i].data(), ps.data() + 20 * i, 20);
  if (m.info_dict() != info->raw) return bad("info dict is not in canonical form");
  if (trackers_out) {
    trackers_out->clear();
    if (const auto* al = root->find("announce-list"); al && al->is_list()) {
      for (const auto& tier : al->as_list()) {
        if (!tier.is_list()) continue;
        for (const auto& t : tier.as_list()) {
          if (t.is_string()) trackers_out->push_back(t.as_string());
        }
      }
    } else if (const auto* a = root->find("announce"); a && a->is_string()) {
      trackers_out->push_back(a->as_string());
    }
  }
  return m;
}

struct metainfo_builder::impl {
  md_ctx sha256{EVP_sha256()};
  md_ctx sha1{EVP_sha1()};
  std::uint32_t piece_size = 0;
  std::uint32_t in_piece = 0;
  std::vector<sha1_hash> pieces;

  void end_piece() {
    sha1_hash h{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(sha1.c, h.data(), &n);
    pieces.push_back(h);
    EVP_DigestInit_ex(sha1.c, EVP_sha1(), nullptr);
    in_piece = 0;
  }
};

metainfo_builder::metainfo_builder(std::uint64_t size, bool hash_object)
    : impl_(std::make_unique<impl>()), size_(size), hash_object_(hash_object) {
  impl_->piece_size = piece_size_for(size);
  impl_->pieces.reserve(
      static_cast<std::size_t>((size + impl_->piece_size - 1) / impl_->piece_size));
}
metainfo_builder::~metainfo_builder() = default;
metainfo_builder::metainfo_builder(metainfo_builder&&) noexcept = default;
metainfo_builder& metainfo_builder::operator=(metainfo_builder&&) noexcept = default;

void metainfo_builder::update(const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  fed_ += n;
  if (hash_object_) EVP_DigestUpdate(impl_->sha256.c, p, n);
  while (n > 0) {
    std::size_t take = std::min<std::size_t>(n, impl_->piece_size - impl_->in_piece);
    EVP_DigestUpdate(impl_->sha1.c, p, take);
    impl_->in_piece += static_cast<std::uint32_t>(take);
    p += take;
    n -= take;
    if (impl_->in_piece == impl_->piece_size) impl_->end_piece();
  }
}

result<object_metainfo> metainfo_builder::finish(const digest& expected) {
  if (fed_ != size_) {
    return fail(errc::size_mismatch, expected.short_str() + ": got " + std::to_string(fed_) +
                                         " bytes, expected " + std::to_string(size_));
  }
  if (impl_->in_piece > 0) impl_->end_piece();
  if (hash_object_) {
    std::array<std::uint8_t, 32> d{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(impl_->sha256.c, d.data(), &n);
    digest got{d};
    if (got != expected) {
      return fail(errc::digest_mismatch,
                  "content hashes to " + got.str() + ", expected " + expected.str());
    }
  }
  object_metainfo m;
  m.object = expected;
  m.size = size_;
  m.piece_size = impl_->piece_size;
  m.pieces = std::move(impl_->pieces);
  return m;
}

struct async_metainfo_builder::impl {
  metainfo_builder b;
  std::size_t max_queued;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> q;
  std::size_t queued = 0;
  bool closed = false;
  std::thread worker;

  impl(std::uint64_t size, bool hash_object, std::size_t maxq)
      : b(size, hash_object), max_queued(maxq) {
    worker = std::thread([this] {
      name_this_thread("piece-hash");
      run();
    });
  }
  void run() {
    std::unique_lock lk(mu);
    for (;;) {
      cv.wait(lk, [this] { return closed || !q.empty(); });
      if (q.empty()) return;
      std::string chunk = std::move(q.front());
      q.pop_front();
      lk.unlock();
      b.update(chunk.data(), chunk.size());
      lk.lock();
      queued -= chunk.size();
      cv.notify_all();
    }
  }
  void close() {
    {
      std::lock_guard lk(mu);
      if (closed) return;
      closed = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
};

async_metainfo_builder::async_metainfo_builder(std::uint64_t size, bool hash_object,
                                               std::size_t max_queued)
    : impl_(std::make_unique<impl>(size, hash_object, max_queued)) {}

async_metainfo_builder::~async_metainfo_builder() { impl_->close(); }

void async_metainfo_builder::update(const void* data, std::size_t n) {
  if (n == 0) return;
  std::unique_lock lk(impl_->mu);
  impl_->cv.wait(
      lk, [this, n] { return impl_->queued == 0 || impl_->queued + n <= impl_->max_queued; });
  impl_->q.emplace_back(static_cast<const char*>(data), n);
  impl_->queued += n;
  lk.unlock();
  impl_->cv.notify_all();
}

result<object_metainfo> async_metainfo_builder::finish(const digest& expected) {
  impl_->close();
  return impl_->b.finish(expected);
}

result<object_metainfo> metainfo_for_fd(int fd, std::uint64_t size, const digest& expected) {
  metainfo_builder b(size);
  std::vector<char> buf(1 << 20);
  std::uint64_t off = 0;
  while (off < size) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "read " + expected.short_str());
    }
    if (n == 0) break;
    b.update(buf.data(), static_cast<std::size_t>(n));
    off += static_cast<std::uint64_t>(n);
  }
  return b.finish(expected);
}

result<object_metainfo> metainfo_for_file(const std::string& path, const digest& expected) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(errno, "open " + path);
  off_t end = ::lseek(fd.get(), 0, SEEK_END);
  if (end < 0) return fail_errno(errno, "seek " + path);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  return metainfo_for_fd(fd.get(), static_cast<std::uint64_t>(end), expected);
}

}  // namespace shoal

namespace shoal {

std::vector<std::pair<digest, std::uint64_t>> pack_order(
    std::vector<std::pair<digest, std::uint64_t>> files) {
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  files.erase(std::unique(files.begin(), files.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              files.end());
  return files;
}

std::uint64_t pack_metainfo::total_size() const {
  std::uint64_t t = 0;
  for (const auto& f : files) t += f.second;
  return t;
}

std::string pack_metainfo::info_dict() const {
  bencode::list fl;
  for (const auto& [d, size] : files) {
    bencode::dict f;
    f["length"] = static_cast<std::int64_t>(size);
    std::string hex = d.hex();
    f["path"] = bencode::list{bencode::value(hex.substr(0, 2)), bencode::value(hex)};
    fl.emplace_back(std::move(f));
  }
  std::string pieces_str;
  pieces_str.reserve(pieces.size() * 20);
  for (const auto& p : pieces) pieces_str.append(reinterpret_cast<const char*>(p.data()), p.size());
  bencode::dict info;
  info["files"] = std::move(fl);
  info["name"] = "sha256";
  info["piece length"] = static_cast<std::int64_t>(piece_size);
  info["pieces"] = std::move(pieces_str);
  info["private"] = 1;
  if (!ssl_cert.empty()) info["ssl-cert"] = ssl_cert;
  return bencode::encode(bencode::value(std::move(info)));
}

sha1_hash pack_metainfo::info_hash() const { return sha1_of(info_dict()); }
std::string pack_metainfo::info_hash_hex() const { return hex_of(info_hash()); }

std::string pack_metainfo::torrent_file(const std::vector<std::string>& trackers) const {
  return torrent_around(info_dict(), trackers);
}

result<pack_metainfo> pack_metainfo::parse(std::string_view torrent,
                                           std::vector<std::pair<digest, std::uint64_t>> expected) {
  auto roots = metainfo_roots();
  return parse_rooted(torrent, std::move(expected), pick_root(torrent, roots));
}

result<pack_metainfo> pack_metainfo::parse_rooted(
    std::string_view torrent, std::vector<std::pair<digest, std::uint64_t>> expected,
    std::string_view ca) {
  bencode::limits lim;
  lim.max_depth = 8;
  lim.max_items = 8u << 20;
  auto root = bencode::decode(torrent, lim);
  if (!root) return fail(root.error().wrap("pack metainfo"));
  auto bad = [](const std::string& why) {
    return fail(errc::protocol_error, "pack metainfo: " + why);
  };
  const auto* info = root->find("info");
  if (!info || !info->is_dict()) return bad("no info dict");
  if (auto why = root_problem(*info, ca)) return bad(*why);
  pack_metainfo m;
  m.ssl_cert = std::string(ca);
  m.files = pack_order(std::move(expected));
  const auto* plen = info->find("piece length");
  const auto* pieces = info->find("pieces");
  if (!plen || !plen->is_int() ||
      static_cast<std::uint64_t>(plen->as_int()) != piece_size_for(m.total_size())) {
    return bad("piece length does not follow the rule");
  }
  m.piece_size = static_cast<std::uint32_t>(plen->as_int());
  if (!pieces || !pieces->is_string() || pieces->as_string().size() % 20 != 0)
    return bad("bad pieces");
  std::uint64_t want = (m.total_size() + m.piece_size - 1) / m.piece_size;
  if (pieces->as_string().size() / 20 != want) return bad("piece count does not match the files");
  m.pieces.resize(static_cast<std::size_t>(want));
  for (std::size_t i = 0; i < m.pieces.size(); ++i)
    std::memcpy(m.pieces[i].data(), pieces->as_string().data() + 20 * i, 20);
  // The whole info dict must be exactly what these files and pieces give.
  if (m.info_dict() != info->raw) return bad("info dict does not describe the expected objects");
  return m;
}

result<pack_metainfo> build_pack(
    const std::vector<std::pair<digest, std::uint64_t>>& in,
    const std::function<result<std::size_t>(const digest&, std::uint64_t, char*, std::size_t)>&
        read) {
  pack_metainfo m;
  m.files = pack_order(in);
  metainfo_builder pieces(m.total_size(), false);
  std::vector<char> buf(1 << 20);
  for (const auto& [d, size] : m.files) {
    sha256_hasher h;
    std::uint64_t off = 0;
    while (off < size) {
      auto n = read(d, off, buf.data(),
                    static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off)));
      if (!n) return fail(n.error().wrap("pack member " + d.short_str()));
      if (*n == 0)
        return fail(errc::size_mismatch, "pack member " + d.short_str() + " ended early");
      h.update(buf.data(), *n);
      pieces.update(buf.data(), *n);
      off += *n;
    }
    if (h.finish() != d)
      return fail(errc::digest_mismatch,
                  "pack member " + d.short_str() + " does not match its digest");
  }
  // The placeholder digest only names the pack in messages: the members were verified above.
  auto r = pieces.finish(digest{});
  if (!r) return fail(r.error());
  m.piece_size = r->piece_size;
  m.pieces = std::move(r->pieces);
  return m;
}

}  // namespace shoal
