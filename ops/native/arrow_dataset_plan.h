// What the Arrow dataset op (arrow_dataset_op.cc) computes without TensorFlow: which rows of which
// units make up batch i, the position after it, and the shards memory-mapped, each checked to be
// the file that was verified when the dataset was made.
//
// The row rule is `transforms.tfdata.columnar.row_plan.RowPlan`'s: an epoch is the worker's units
// end to end (permuted each epoch when shuffling, and the rows inside each unit too, with numpy's
// permutations: numpy_permutation.h), batch i is rows [begin, end) of it across unit boundaries,
// the position is (epoch, unit in the epoch's order, row in unit).
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
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "numpy_permutation.h"

namespace sparseflow {

class RowPlan {
 public:
  int64_t batch_size = 1;
  bool drop_remainder = false;
  int64_t start_epoch = 0;
  int64_t start_row = 0;
  int64_t fingerprint = 0;
  bool shuffle = false;
  uint64_t seed = 0;  // with `shuffle`: units are permuted by (seed, epoch), a unit's rows by (seed, epoch, unit, 1)

  void SetUnits(std::vector<int64_t> rows) {
    unit_rows_ = std::move(rows);
    rows_per_epoch_ = 0;
    for (int64_t n : unit_rows_) rows_per_epoch_ += n;
  }
  // A new seed (a checkpoint's): the orders cached are another seed's.
  void Reseed(uint64_t new_seed) {
    seed = new_seed;
    order_epoch_ = -1;
    perms_.clear();
  }
  int64_t RowsPerEpoch() const { return rows_per_epoch_; }
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

  // The position after row `row` of `epoch` (epoch, unit in the epoch's order, row in unit,
  // fingerprint): an epoch's end is the next one's start, as is a remainder `drop_remainder` drops.
  void Position(int64_t epoch, int64_t row, int64_t* out) {
    const int64_t remaining = RowsPerEpoch() - row;
    out[3] = fingerprint;
    if (remaining == 0 || (drop_remainder && remaining < batch_size)) {
      out[0] = epoch + 1;
      out[1] = out[2] = 0;
      return;
    }
    Order(epoch);
    const int64_t k = UnitAt(row);
    out[0] = epoch;
    out[1] = k;
    out[2] = row - cum_[k];
  }

  // Rows [begin, end) of an epoch as pieces, in order: the unit, and its rows from `begins` on
  // (`index` 0) or, shuffled, the `counts` rows listed at the address in `index`. The lists stay
  // valid until the next call.
  void Pieces(int64_t epoch, int64_t begin, int64_t end, std::vector<int64_t>* units, std::vector<int64_t>* begins,
              std::vector<int64_t>* counts, std::vector<int64_t>* index) {
    Order(epoch);
    units->clear();
    begins->clear();
    counts->clear();
    index->clear();
    if (perms_.size() > kCachedPermutations) perms_.clear();
    for (int64_t k = UnitAt(begin); k < static_cast<int64_t>(order_.size()) && cum_[k] < end; ++k) {
      const int64_t unit = order_[k];
      const int64_t lo = std::max<int64_t>(begin - cum_[k], 0), hi = std::min(end - cum_[k], unit_rows_[unit]);
      if (hi <= lo) continue;  // a unit of no rows
      units->push_back(unit);
      counts->push_back(hi - lo);
      if (shuffle) {
        begins->push_back(0);
        index->push_back(reinterpret_cast<int64_t>(Permutation(epoch, unit).data() + lo));
      } else {
        begins->push_back(lo);
        index->push_back(0);
      }
    }
  }

  // Units handed out one at a time (the tf.data service's split by units: `Take`): the next `want`
  // rows from `unit` (epoch 0's rows, permuted when shuffling) from its row `*row` on, as one piece.
  int64_t TakePiece(int64_t unit, int64_t* row, int64_t want, std::vector<int64_t>* begins,
                    std::vector<int64_t>* index) {
    const int64_t take = std::min(want, unit_rows_[unit] - *row);
    if (shuffle) {
      begins->push_back(0);
      index->push_back(reinterpret_cast<int64_t>(Permutation(0, unit).data() + *row));
    } else {
      begins->push_back(*row);
      index->push_back(0);
    }
    *row += take;
    return take;
  }
  // Forgets the rows' orders cached past a few (a reader of handed-out units calls it per batch).
  void TrimPermutations() {
    if (perms_.size() > kCachedPermutations) perms_.clear();
  }
  int64_t UnitRows(int64_t unit) const { return unit_rows_[unit]; }
  int64_t NumUnits() const { return static_cast<int64_t>(unit_rows_.size()); }
  // Epoch `epoch`'s units in order.
  const std::vector<int64_t>& UnitOrder(int64_t epoch) {
    Order(epoch);
    return order_;
  }

 private:
  static constexpr size_t kCachedPermutations = 16;

  void Order(int64_t epoch) {
    if (epoch == order_epoch_) return;
    const int64_t units = static_cast<int64_t>(unit_rows_.size());
    if (shuffle) {
      order_ = NumpyPermutation({seed, static_cast<uint64_t>(epoch)}, units);
    } else {
      order_.resize(units);
      for (int64_t k = 0; k < units; ++k) order_[k] = k;
    }
    cum_.assign(units + 1, 0);
    for (int64_t k = 0; k < units; ++k) cum_[k + 1] = cum_[k] + unit_rows_[order_[k]];
    order_epoch_ = epoch;
  }

  // The position in the epoch's order of the unit holding row `row` (the last starting at or before it).
  int64_t UnitAt(int64_t row) const {
    return static_cast<int64_t>(std::upper_bound(cum_.begin(), cum_.end(), row) - cum_.begin()) - 1;
  }

  const std::vector<int64_t>& Permutation(int64_t epoch, int64_t unit) {
    auto found = perms_.find({epoch, unit});
    if (found != perms_.end()) return found->second;
    const std::vector<uint64_t> entropy{seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(unit), 1};
    return perms_.emplace(std::make_pair(epoch, unit), NumpyPermutation(entropy, unit_rows_[unit])).first->second;
  }

  std::vector<int64_t> unit_rows_;
  int64_t rows_per_epoch_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_, cum_;  // the epoch's units in order, and the rows before each (then all)
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> perms_;  // (epoch, unit) -> its rows' order
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
    if (fd < 0) return Unreadable(path);
    struct stat st;
    std::string error = fstat(fd, &st) != 0 ? Unreadable(path) : Compare(path, st, size, mtime_ns, inode);
    if (!error.empty()) {
      close(fd);
      return error;
    }
    ctime_ns_ = ChangeTime(st);
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
  // The file's status change time when it was mapped: any write since (or a utime setting its
  // mtime back) moves it, so what was checked of the mapping holds while it stays.
  int64_t ctime_ns() const { return ctime_ns_; }
  void set_ctime_ns(int64_t ctime_ns) { ctime_ns_ = ctime_ns; }

  // "" while `path` is still the file verified (its size, mtime_ns and inode), else Map's error, and
  // its status change time in *ctime_ns: a mapping kept for the dataset's life is read again only
  // while its path names that same file.
  static std::string Unchanged(const std::string& path, int64_t size, int64_t mtime_ns, int64_t inode,
                               int64_t* ctime_ns) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return Unreadable(path);
    *ctime_ns = ChangeTime(st);
    return Compare(path, st, size, mtime_ns, inode);
  }

 private:
  static std::string Unreadable(const std::string& path) {
    if (errno == ENOENT) return path + ": removed since it was verified; make the dataset again";
    return path + ": cannot be read: " + std::strerror(errno);
  }

  static std::string Compare(const std::string& path, const struct stat& st, int64_t size, int64_t mtime_ns,
                             int64_t inode) {
    const int64_t now_mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (st.st_size == size && now_mtime == mtime_ns && static_cast<int64_t>(st.st_ino) == inode) return "";
    return path + ": replaced or changed since it was verified (size, mtime_ns, inode " + Triple(size, mtime_ns, inode) +
           " then, " + Triple(st.st_size, now_mtime, static_cast<int64_t>(st.st_ino)) +
           " now: another run wrote this output?); make the dataset again";
  }

  static int64_t ChangeTime(const struct stat& st) {
    return static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  }

  static std::string Triple(int64_t a, int64_t b, int64_t c) {
    return "(" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + ")";
  }

  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  int64_t ctime_ns_ = 0;
};

}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_ARROW_DATASET_PLAN_H_
