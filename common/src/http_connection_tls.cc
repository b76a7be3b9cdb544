// The TLS-only members of connection<tls_stream> (http_connection.h): a plaintext client told
// apart from a TLS hello and answered in plain HTTP, the handshake under the header deadline,
// refusals logged with their reason, the client certificate's identity, and files sent as TLS
// records written to the socket in large batches (no sendfile: this kernel has no kTLS).
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include "common/tls.h"
#include "http_connection.h"

namespace shoal::http {

namespace {

// The first bytes a client sent, for a log line: printable ASCII up to the first line end, at
// most 48 characters, anything else as '.'.
std::string first_line(const beast::flat_buffer& b) {
  std::string out;
  const auto data = b.cdata();
  const auto* p = static_cast<const unsigned char*>(data.data());
  for (std::size_t i = 0; i < data.size() && out.size() < 48; ++i) {
    if (p[i] == '\r' || p[i] == '\n') break;
    out += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : '.';
  }
  return out;
}

// A write-only BIO that appends everything OpenSSL writes to a std::vector<char> (its data
// pointer): the TLS records of one SSL_write, collected for one socket write.
int collect_write(BIO* b, const char* data, int len) {
  auto* out = static_cast<std::vector<char>*>(BIO_get_data(b));
  if (out == nullptr || len < 0) return -1;
  out->insert(out->end(), data, data + len);
  return len;
}

long collect_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

const BIO_METHOD* collect_method() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* b = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "shoal tls records");
    if (b != nullptr) {
      BIO_meth_set_write(b, collect_write);
      BIO_meth_set_ctrl(b, collect_ctrl);
    }
    return b;
  }();
  return m;
}

std::string openssl_reason() {
  const char* r = ERR_reason_error_string(ERR_peek_last_error());
  return r != nullptr ? r : "no OpenSSL error queued";
}

// Encrypts `data` into TLS records appended to `out`, bypassing the stream's own output BIO:
// asio's engine moves at most one record (16 KiB) per write operation through a 17 KiB BIO pair,
// so a large body costs one copy, one send(2) and one completion per record. Here OpenSSL writes
// all records of `data` into `out` in one SSL_write, and the caller sends them in one write.
// Only valid between operations on the stream (the engine holds no unsent output then); the
// swap of the write BIO and its restoration happen within this call.
bool seal_records(SSL* ssl, const char* data, std::size_t len, std::vector<char>& out,
                  std::string& why) {
  if (SSL_is_init_finished(ssl) != 1) {
    why = "TLS write: handshake not finished";
    return false;
  }
  ERR_clear_error();
  const BIO_METHOD* method = collect_method();
  BIO* collect = method != nullptr ? BIO_new(method) : nullptr;
  if (collect == nullptr) {
    why = "TLS record buffer: " + openssl_reason();
    return false;
  }
  BIO_set_data(collect, &out);
  BIO_set_init(collect, 1);
  BIO* engine_bio = SSL_get_wbio(ssl);
  BIO_up_ref(engine_bio);       // SSL_set0_wbio below drops one reference of the old BIO
  SSL_set0_wbio(ssl, collect);  // owns `collect` from here
  // asio runs the SSL with partial writes on (SSL_write returns after each record); off here, one
  // call writes every record and keeps its buffers until the end (asio also sets
  // SSL_MODE_RELEASE_BUFFERS, which frees them whenever a call returns).
  const long partial = SSL_get_mode(ssl) & SSL_MODE_ENABLE_PARTIAL_WRITE;
  SSL_clear_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
  std::size_t done = 0;
  int n = 1;
  while (done < len && n > 0) {
    n = SSL_write(ssl, data + done, static_cast<int>(len - done));
    if (n > 0) done += static_cast<std::size_t>(n);
  }
  const int err = n > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, n);
  SSL_set_mode(ssl, partial);
  SSL_set0_wbio(ssl, engine_bio);  // frees `collect`, takes back our reference
  if (done == len) return true;
  why = "TLS write: SSL error " + std::to_string(err) + ": " + openssl_reason();
  return false;
}

std::string endpoint_text(const tcp::endpoint& ep) {
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

// Why a server-side handshake failed, in words an operator can act on.
std::string handshake_failure(SSL* ssl, const beast::error_code& ec,
                              std::chrono::milliseconds deadline) {
  if (ec == beast::error::timeout)
    return "TLS handshake not finished within " + std::to_string(deadline.count()) + " ms";
  const long vr = SSL_get_verify_result(ssl);
  if (vr != X509_V_OK) {
    std::string why =
        std::string("client certificate rejected: ") + X509_verify_cert_error_string(vr);
    if (vr == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
        vr == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT || vr == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN)
      why += " (not signed by the cluster CA)";
    return why;
  }
  if (ec.category() == net::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) ==
          SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    return "no client certificate: this server requires one (mutual TLS)";
  }
  if (ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::ssl::error::stream_truncated) {
    return "client closed the connection during the TLS handshake (" + ec.message() +
           "; a client that does not trust this server's certificate does this)";
  }
  return "TLS handshake failed: " + ec.message();
}

}  // namespace

template <class Stream>
void connection<Stream>::handshake() {
  if (closed_) return;
  // Detecting a plaintext client and the handshake share one deadline: the header's.
  waiting_ = true;
  lowest().expires_after(std::min(srv_->opts.header_timeout, srv_->opts.idle_timeout));
  beast::async_detect_ssl(lowest(), buf_, [self = self()](beast::error_code ec, bool hello) {
    self->on_detect(ec, hello);
  });
}

template <class Stream>
void connection<Stream>::on_detect(beast::error_code ec, bool is_tls_hello) {
  if (closed_) return;
  if (ec) {
    // A TCP probe (connect, close) is no refusal; a client that sent nothing in time is.
    if (ec == beast::error::timeout) {
      srv_->tls_failed.fetch_add(1, std::memory_order_relaxed);
      log::debug("tls connection closed: no TLS hello in time",
                 log::kv("remote", endpoint_text(remote_)));
    }
    return close_now();
  }
  if (!is_tls_hello) return refuse_plaintext();
  stream_.async_handshake(
      net::ssl::stream_base::server, buf_.data(),
      [self = self()](beast::error_code e, std::size_t used) { self->on_handshake(e, used); });
}

template <class Stream>
void connection<Stream>::on_handshake(beast::error_code ec, std::size_t used) {
  if (closed_) return;
  if (ec) {
    const auto deadline = std::min(srv_->opts.header_timeout, srv_->opts.idle_timeout);
    srv_->tls_failed.fetch_add(1, std::memory_order_relaxed);
    log_refusal("tls handshake refused", handshake_failure(stream_.native_handle(), ec, deadline));
    return close_now();
  }
  buf_.consume(used);
  SSL* ssl = stream_.native_handle();
  const X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert != nullptr && SSL_get_verify_result(ssl) == X509_V_OK) {
    peer_.verified = true;
    std::string problem;
    auto id = tls::identity_from_certificate(cert, &problem);
    peer_.role = id.role;
    peer_.name = std::move(id.name);
    if (STACK_OF(X509)* chain = SSL_get0_verified_chain(ssl); chain && sk_X509_num(chain) > 0)
      peer_.ca_fingerprint =
          tls::certificate_fingerprint(sk_X509_value(chain, sk_X509_num(chain) - 1));
    std::uint64_t suppressed = 0;
    if (peer_.role == tls::peer_role::none && srv_->tls_log_allowed(suppressed)) {
      log::warn("tls client certificate carries no identity; served without a role",
                log::kv("remote", endpoint_text(remote_)), log::kv("reason", problem),
                log::kv("suppressed_before", suppressed));
    }
  }
  do_read();
}

template <class Stream>
void connection<Stream>::refuse_plaintext() {
  srv_->tls_plaintext.fetch_add(1, std::memory_order_relaxed);
  log_refusal("plaintext request on a TLS port refused",
              "the client sent \"" + first_line(buf_) +
                  "\" instead of a TLS hello: it must use https:// (and the cluster CA)");
  static const std::string body =
      "this port speaks HTTPS only (TLS, mutual with the cluster's certificates): use "
      "https://\n";
  auto msg = std::make_shared<std::string>(
      "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  busy_ = true;
  waiting_ = false;
  lowest().expires_after(srv_->opts.write_timeout);
  net::async_write(lowest(), net::buffer(*msg),
                   [self = self(), msg](beast::error_code ec, std::size_t) {
                     if (ec) return self->close_now();
                     // Half-close, then read what the client still sends (briefly): closing
                     // with unread bytes would reset the connection and could destroy the
                     // answer before the client reads it.
                     beast::error_code e2;
                     self->sock().shutdown(tcp::socket::shutdown_send, e2);
                     self->buf_.clear();
                     self->lowest().expires_after(std::chrono::seconds(1));
                     self->drain_plaintext(0);
                   });
}

template <class Stream>
void connection<Stream>::drain_plaintext(std::size_t drained) {
  if (closed_ || drained > (256u << 10)) return close_now();
  lowest().async_read_some(buf_.prepare(16 << 10),
                           [self = self(), drained](beast::error_code ec, std::size_t n) {
                             if (ec) return self->close_now();
                             self->buf_.clear();
                             self->drain_plaintext(drained + n);
                           });
}

template <class Stream>
void connection<Stream>::log_refusal(std::string_view what, std::string_view why) {
  std::uint64_t suppressed = 0;
  if (!srv_->tls_log_allowed(suppressed)) return;
  log::warn(what, log::kv("remote", endpoint_text(remote_)), log::kv("reason", why),
            log::kv("suppressed_before", suppressed));
}

template <class Stream>
void connection<Stream>::write_sealed(const char* data, std::size_t len,
                                      std::function<void(beast::error_code)> done) {
  // At most 16 KiB of plaintext per record, each with a header and a tag (22 bytes in TLS 1.3,
  // 29 in TLS 1.2 with AES-GCM); 64 per record leaves room.
  records_.clear();
  records_.reserve(len + (len / 16384 + 1) * 64);
  std::string why;
  if (!seal_records(stream_.native_handle(), data, len, records_, why))
    return abort(std::move(why));
  net::async_write(lowest(), net::buffer(records_),
                   [done = std::move(done)](beast::error_code ec, std::size_t) { done(ec); });
}

template <class Stream>
void connection<Stream>::send_file_tls(int fd, std::uint64_t off, std::uint64_t len,
                                       std::function<void()> next) {
  if (closed_) return;
  if (len == 0) return next();
  // One buffer per connection, reused; the read is from the page cache in the common case, like
  // sendfile(2)'s on the plain path. 64 KiB (four records per socket write): the plaintext and
  // its records stay in the core's L2 cache; 256 KiB cost about 10 % more CPU per GiB served.
  constexpr std::size_t kPiece = 64u << 10;
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(len, kPiece));
  if (file_buf_.size() < want) file_buf_.resize(kPiece);
  ssize_t n;
  do {
    n = ::pread(fd, file_buf_.data(), want, static_cast<off_t>(off));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return abort(std::string("read file: ") + std::strerror(errno));
  if (n == 0) return abort("read file: file ended " + std::to_string(len) + " bytes early");
  const auto got = static_cast<std::uint64_t>(n);
  lowest().expires_after(srv_->opts.write_timeout);
  write_sealed(
      file_buf_.data(), static_cast<std::size_t>(got),
      [self = self(), fd, off, len, got, next = std::move(next)](beast::error_code ec) mutable {
        if (ec) {
          return self->abort(ec == beast::error::timeout ? "client stopped reading (write timeout)"
                                                         : "write body: " + ec.message());
        }
        self->sent_ += got;
        self->send_file_tls(fd, off + got, len - got, std::move(next));
      });
}

template void connection<tls_stream>::handshake();
template void connection<tls_stream>::on_detect(beast::error_code, bool);
template void connection<tls_stream>::on_handshake(beast::error_code, std::size_t);
template void connection<tls_stream>::refuse_plaintext();
template void connection<tls_stream>::drain_plaintext(std::size_t);
template void connection<tls_stream>::log_refusal(std::string_view, std::string_view);
template void connection<tls_stream>::send_file_tls(int, std::uint64_t, std::uint64_t,
                                                    std::function<void()>);
template void connection<tls_stream>::write_sealed(const char*, std::size_t,
                                                   std::function<void(beast::error_code)>);

}  // namespace shoal::http
