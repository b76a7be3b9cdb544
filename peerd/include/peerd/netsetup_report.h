#pragma once
// netsetup's discovery document for the heartbeat (`node.netsetup_report`): read from its file,
// checked to be a JSON object of at most heartbeat::max_document_bytes, and kept while the file
// is unchanged (file_stamp: identity, size, mtime, ctime), so a heartbeat every interval costs a
// stat(), not a read and a parse of some 22 KB (an 8-NIC node) each time. netsetup writes the
// file with a rename, which gives a new stamp; so does an edit in place of another size or
// after the kernel's timestamp tick (a few ms), which changes mtime and ctime.
//
// Blocking file work: call it from the heartbeat thread, never from an event loop. Not
// thread-safe (one owner).

#include <cstdint>
#include <string>

#include "common/file.h"

namespace shoal::peerd {

class netsetup_report {
 public:
  explicit netsetup_report(std::string path) : path_(std::move(path)) {}

  struct reading {
    bool ok = false;
    std::string text;    // the document as written, when ok
    std::string reason;  // why not, for health_reasons, when not ok
  };
  // The document now: the kept one while the file's stamp is the one it was read at, else read
  // again. A file that cannot be read is tried again at the next call.
  [[nodiscard]] const reading& current();
  // How many times the file was read (tests).
  [[nodiscard]] std::uint64_t reads() const { return reads_; }

 private:
  std::string path_;
  file_stamp stamp_;
  bool kept_ = false;
  reading last_;
  std::uint64_t reads_ = 0;
};

}  // namespace shoal::peerd
