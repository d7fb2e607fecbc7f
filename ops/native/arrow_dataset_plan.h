// What the Arrow dataset op (arrow_dataset_op.cc) computes without TensorFlow: which rows of which
// units make up batch i, the position after it, and the shards memory-mapped, each checked to be
// the file that was verified when the dataset was made.
//
// The row rule is `transforms.tfdata.columnar.row_plan.RowPlan`'s for an unshuffled plan (the op
// reads no shuffled plan): an epoch is the worker's units end to end, batch i is rows
// [begin, end) of it across unit boundaries, the position is (epoch, unit, row in unit).
#ifndef SPARSEFLOW_NATIVE_ARROW_DATASET_PLAN_H_
#define SPARSEFLOW_NATIVE_ARROW_DATASET_PLAN_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sparseflow {

struct RowPlan {
  std::vector<int64_t> unit_rows;
  std::vector<int64_t> cum;  // cum[k]: the epoch's rows before unit k; cum.back(): the epoch's rows
  int64_t batch_size = 1;
  bool drop_remainder = false;
  int64_t start_epoch = 0;
  int64_t start_row = 0;
  int64_t fingerprint = 0;

  void SetUnits(std::vector<int64_t> rows) {
    unit_rows = std::move(rows);
    cum.assign(unit_rows.size() + 1, 0);
    for (size_t k = 0; k < unit_rows.size(); ++k) cum[k + 1] = cum[k] + unit_rows[k];
  }
  int64_t RowsPerEpoch() const { return cum.back(); }
  int64_t Batches(int64_t rows) const {
    return drop_remainder ? rows / batch_size : (rows + batch_size - 1) / batch_size;
  }
  int64_t BatchesPerEpoch() const { return Batches(RowsPerEpoch()); }

  // Batches from the start over `num_epochs` epochs; -1 (endless) for a negative count.
  int64_t NumBatches(int64_t num_epochs) const {
    if (num_epochs < 0) return -1;
    if (start_epoch >= num_epochs) return 0;
    return Batches(RowsPerEpoch() - start_row) + (num_epochs - start_epoch - 1) * BatchesPerEpoch();
  }

  // Batch i as (epoch, begin, end); false where the plan has no batch i (an epoch of no batch).
  bool Locate(int64_t i, int64_t* epoch, int64_t* begin, int64_t* end) const {
    const int64_t first = Batches(RowsPerEpoch() - start_row);
    if (i < first) {
      *epoch = start_epoch;
      *begin = start_row + i * batch_size;
    } else {
      const int64_t per_epoch = BatchesPerEpoch();
      if (per_epoch == 0) return false;
      const int64_t j = i - first;
      *epoch = start_epoch + 1 + j / per_epoch;
      *begin = (j % per_epoch) * batch_size;
    }
    *end = std::min(*begin + batch_size, RowsPerEpoch());
    return true;
  }

  // The unit holding row `row` of an epoch (the last unit starting at or before it).
  int64_t UnitAt(int64_t row) const {
    return static_cast<int64_t>(std::upper_bound(cum.begin(), cum.end(), row) - cum.begin()) - 1;
  }

  // The position after row `row` of `epoch` (epoch, unit, row in unit, fingerprint): an epoch's
  // end is the next one's start, as is a remainder that `drop_remainder` drops.
  void Position(int64_t epoch, int64_t row, int64_t* out) const {
    const int64_t remaining = RowsPerEpoch() - row;
    out[3] = fingerprint;
    if (remaining == 0 || (drop_remainder && remaining < batch_size)) {
      out[0] = epoch + 1;
      out[1] = out[2] = 0;
      return;
    }
    const int64_t unit = UnitAt(row);
    out[0] = epoch;
    out[1] = unit;
    out[2] = row - cum[unit];
  }

  // Rows [begin, end) of an epoch as pieces: (unit, first row in it, rows), in order.
  void Pieces(int64_t begin, int64_t end, std::vector<int64_t>* units, std::vector<int64_t>* begins,
              std::vector<int64_t>* counts) const {
    units->clear();
    begins->clear();
    counts->clear();
    for (int64_t k = UnitAt(begin); k < static_cast<int64_t>(unit_rows.size()) && cum[k] < end; ++k) {
      const int64_t lo = std::max<int64_t>(begin - cum[k], 0), hi = std::min(end - cum[k], unit_rows[k]);
      if (hi <= lo) continue;  // a unit of no rows
      units->push_back(k);
      begins->push_back(lo);
      counts->push_back(hi - lo);
    }
  }
};

// A shard memory-mapped read-only, after checking it is the file verified: the same size,
// modification time (ns) and inode (`sparse_io.pins.ShardPin`, whose messages these are).
class MappedShard {
 public:
  MappedShard() = default;
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;
  ~MappedShard() {
    if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
  }

  // Maps `path`; returns "" or the one-line error.
  std::string Map(const std::string& path, int64_t size, int64_t mtime_ns, int64_t inode) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return path + ": removed since it was verified; make the dataset again";
      return path + ": cannot be opened: " + std::strerror(errno);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const std::string error = path + ": cannot be read: " + std::strerror(errno);
      close(fd);
      return error;
    }
    const int64_t now_mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_size != size || now_mtime != mtime_ns || static_cast<int64_t>(st.st_ino) != inode) {
      close(fd);
      return path + ": replaced or changed since it was verified (size, mtime_ns, inode " + Triple(size, mtime_ns, inode) +
             " then, " + Triple(st.st_size, now_mtime, static_cast<int64_t>(st.st_ino)) +
             " now: another run wrote this output?); make the dataset again";
    }
    if (size > 0) {
      void* mapped = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
      if (mapped == MAP_FAILED) {
        const std::string error = path + ": cannot be mapped: " + std::strerror(errno);
        close(fd);
        return error;
      }
      base_ = static_cast<const uint8_t*>(mapped);
      size_ = static_cast<size_t>(size);
    }
    close(fd);  // the mapping stays valid without the descriptor
    return "";
  }

  const uint8_t* base() const { return base_; }

 private:
  static std::string Triple(int64_t a, int64_t b, int64_t c) {
    return "(" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ")";
  }

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_ARROW_DATASET_PLAN_H_
