#include "core/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace kiln {
namespace {

std::string_view kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

RegularFile::RegularFile(std::string path, std::string_view what)
    : path_(std::move(path)), what_(what) {
  // O_NONBLOCK: opening a fifo with no writer would otherwise wait forever before fstat could
  // refuse it. It changes nothing for reads of a regular file.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    fail(err == ENOENT || err == ENOTDIR ? ErrorCode::NotFound : ErrorCode::InvalidArgument,
         "cannot open {} '{}': {}", what_, path_, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd_);
    fd_ = -1;
    fail(ErrorCode::InvalidArgument, "{} '{}' is {}, not a regular file", what_, path_,
         kind_of(mode));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read_at(uint64_t offset, void* dest, size_t n) const {
  auto* out = static_cast<char*>(dest);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    KILN_CHECK(got >= 0, ErrorCode::Unavailable, "reading {} '{}' failed at byte {}: {}", what_,
               path_, offset + done, std::strerror(errno));
    // The size was checked when the file was opened: it shrank since.
    KILN_CHECK_ARG(got > 0, "{} '{}' ends at byte {}, {} bytes short of what was checked", what_,
                   path_, offset + done, n - done);
    done += static_cast<size_t>(got);
  }
}

std::string RegularFile::read_all(uint64_t max_bytes) const {
  KILN_CHECK_ARG(size_ <= max_bytes, "{} '{}' has {} bytes, over the limit of {}", what_, path_,
                 size_, max_bytes);
  std::string bytes(static_cast<size_t>(size_), '\0');
  read_at(0, bytes.data(), bytes.size());
  return bytes;
}

}  // namespace kiln
