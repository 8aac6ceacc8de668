#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

// Reads `size` bytes of fd from offset 0 into `out`.
absl::Status ReadAll(int fd, const std::string& path, uint8_t* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, " shrank while it was read (", done, " of ", size, " bytes)"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path,
                                                             FileResidency residency) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  common::HugePageMemory memory;
  if (size > 0 && residency == FileResidency::kHugePages) {
    absl::StatusOr<common::HugePageMemory> m = common::HugePageMemory::Allocate(size);
    if (!m.ok()) {
      ::close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot hold ", path, " in memory: ", m.status().message()));
    }
    const absl::Status read = ReadAll(fd, path, m->data(), size);
    ::close(fd);
    if (!read.ok()) return read;
    memory = *std::move(m);
    data = memory.data();
  } else if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) return absl::ErrnoToStatus(err, absl::StrCat("cannot map ", path));
    data = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return std::unique_ptr<MappedFile>(
      new MappedFile(path, residency, data, size, std::move(memory)));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && residency_ == FileResidency::kMapped) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace kvserve::model
