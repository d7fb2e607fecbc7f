// SparseflowArrowDataset: aligned Arrow shards read memory-mapped into the flat batches of
// `transforms.tfdata.columnar` (its `BatchLayout`, COO groups), with no Python in the graph.
//
// What is done once per dataset stays in Python, at graph construction
// (`transforms.tfdata.columnar.arrow_op`): the shards opened, and each unit's column buffers and
// checksummed bytes described by their byte offsets in the file. The op maps each shard when its
// first unit is read (checking it is still the file verified), checks each unit's checksum at its
// first read, turns the offsets into addresses and writes each batch with the kernels the Python
// reader calls (arrow_batch_kernels.h), so both read a unit alike. The op itself is declared in
// arrow_dataset_registration.cc. The plan is the op's inputs, so the dataset serialises (the tf.data
// service runs it) and its iterator's state is the next batch's number.
//
// Element: what `make_dataset` delivers, whole (`ElementLayout` in arrow_dataset.h): each feature's
// `Coo` (padded to its capacity, with the overflow refused or dropped and counted), each dense
// column and the label [n], the position after the batch int64 [4], in the order of the element's
// nest; so no map follows the op, and a new iterator instantiates no function.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arrow_batch_kernels.h"
#include "arrow_dataset.h"
#include "arrow_dataset_plan.h"
#include "arrow_plan_check.h"
#include "crc32c_extend.h"
#include "tensorflow/core/framework/dataset.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sparseflow {
namespace arrow_dataset {

// What one thread writing a batch's columns uses: the columns' descriptors for the batch's pieces,
// their shared weights, room for a feature's entries where its capacity is below that room, and
// the last kernel error {code, descriptor, row}.
struct Scratch {
  std::vector<int64_t> descriptors;
  std::vector<float> weights;
  std::vector<int32_t> rows;
  std::vector<int64_t> ids;  // int64 slots: room for either id width
  std::vector<float> gains;
  int64_t error[3] = {0, 0, 0};
};

// Batches of fewer cells (rows times columns) are written by the iterator's thread alone: handing
// work to the pool costs more than it saves.
constexpr int64_t kParallelCells = 1 << 14;
constexpr int kMaxWriters = 4;

class ArrowDataset::Iterator : public tf::DatasetIterator<ArrowDataset> {
 public:
  explicit Iterator(const Params& params)
      : tf::DatasetIterator<ArrowDataset>(params),
        plan_(dataset()->plan()),
        shards_(dataset()->input(kFilesInput).NumElements()),
        verified_(dataset()->input(kUnitsInput).dim_size(0), false) {}

  absl::Status Initialize(IteratorContext* ctx) override {
    if (ctx->split_providers().size() > 1) {
      return absl::InvalidArgumentError("SparseflowArrowDataset: more than one split provider");
    }
    if (!ctx->split_providers().empty()) splits_ = ctx->split_providers()[0];
    return absl::OkStatus();
  }

  absl::Status GetNextInternal(IteratorContext* ctx, std::vector<Tensor>* out, bool* end_of_sequence) override {
    std::lock_guard<std::mutex> lock(mu_);
    const ArrowDataset& d = *dataset();
    int64_t epoch = 0, begin = 0, end = 0;
    if (splits_ != nullptr) {
      TF_RETURN_IF_ERROR(TakeSplits(&end, end_of_sequence));
      if (*end_of_sequence) return absl::OkStatus();
    } else {
      const int64_t total = plan_.NumBatches(d.num_epochs());
      if ((total >= 0 && next_ >= total) || !plan_.Locate(next_, &epoch, &begin, &end)) {
        *end_of_sequence = true;
        return absl::OkStatus();
      }
      plan_.Pieces(epoch, begin, end, &units_, &begins_, &counts_, &index_);
    }
    for (int64_t unit : units_) TF_RETURN_IF_ERROR(Ready(unit));
    const ElementLayout& e = d.element();
    const int64_t n = end - begin;
    std::vector<Tensor> canonical(e.canonical());
    int64_t dropped = 0;
    TF_RETURN_IF_ERROR(WriteColumns(ctx, n, &canonical, &dropped));
    Tensor position(ctx->allocator({}), tf::DT_INT64, {4}), lost(ctx->allocator({}), tf::DT_INT64, {});
    if (splits_ == nullptr) {
      plan_.Position(epoch, end, position.flat<int64_t>().data());
    } else {  // where this worker is in the unit it reads: not a position the plan resumes at
      auto p = position.flat<int64_t>();
      p(0) = 0, p(1) = split_, p(2) = unit_row_, p(3) = plan_.fingerprint;
    }
    lost.scalar<int64_t>()() = dropped;
    canonical[e.position()] = std::move(position);
    canonical[e.dropped()] = std::move(lost);
    out->reserve(e.components.size());
    for (int64_t k : e.components) out->push_back(canonical[k]);
    ++next_;
    *end_of_sequence = false;
    return absl::OkStatus();
  }

 protected:
  std::shared_ptr<tf::model::Node> CreateNode(IteratorContext*, tf::model::Node::Args args) const override {
    return tf::model::MakeSourceNode(std::move(args));
  }

  absl::Status SaveInternal(tf::SerializationContext*, tf::IteratorStateWriter* writer) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (splits_ != nullptr) {
      return absl::FailedPreconditionError(
          "SparseflowArrowDataset: an iterator reading units handed out by the tf.data service is not saved");
    }
    // The seed too: a shuffled dataset made again draws another where the user gave none.
    TF_RETURN_IF_ERROR(writer->WriteScalar(prefix(), "seed", static_cast<int64_t>(plan_.seed)));
    TF_RETURN_IF_ERROR(writer->WriteScalar(prefix(), "fingerprint", plan_.fingerprint));
    return writer->WriteScalar(prefix(), "next", next_);
  }

  absl::Status RestoreInternal(IteratorContext*, tf::IteratorStateReader* reader) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t seed;
    TF_RETURN_IF_ERROR(reader->ReadScalar(prefix(), "seed", &seed));
    TF_RETURN_IF_ERROR(reader->ReadScalar(prefix(), "fingerprint", &plan_.fingerprint));
    plan_.Reseed(static_cast<uint64_t>(seed));
    return reader->ReadScalar(prefix(), "next", &next_);
  }

 private:
  int64_t Pieces() const { return static_cast<int64_t>(units_.size()); }

  // The next batch's rows from the units the split provider hands out, read on from where the last
  // batch stopped: `*rows` of them; the end once no unit is left (or only a remainder to drop).
  absl::Status TakeSplits(int64_t* rows, bool* end_of_sequence) {
    units_.clear();
    begins_.clear();
    counts_.clear();
    index_.clear();
    plan_.TrimPermutations();
    int64_t want = plan_.batch_size;
    while (want > 0) {
      if (unit_ < 0 || unit_row_ >= plan_.UnitRows(unit_)) {
        if (splits_done_) break;
        Tensor split;
        TF_RETURN_IF_ERROR(splits_->GetNext(&split, &splits_done_));
        if (splits_done_) break;
        split_ = split.scalar<int64_t>()();
        if (split_ < 0 || split_ >= plan_.NumUnits())
          return absl::InvalidArgumentError("SparseflowArrowDataset: a split names no unit");
        unit_ = plan_.UnitOrder(0)[split_];
        unit_row_ = 0;
        continue;
      }
      units_.push_back(unit_);
      const int64_t take = plan_.TakePiece(unit_, &unit_row_, want, &begins_, &index_);
      counts_.push_back(take);
      want -= take;
    }
    *rows = plan_.batch_size - want;
    *end_of_sequence = *rows == 0 || (plan_.drop_remainder && want > 0);
    return absl::OkStatus();
  }

  // The unit's shard mapped and its record batch's checksum checked, by the first of the dataset's
  // iterators to read it (`VerifiedShards`); another iterator checks that the path still names the
  // file mapped, as the Python reader checks its pin at each open, and checks the file's units again
  // if its status change time moved (written in place, its mtime set back).
  absl::Status Ready(int64_t unit) {
    const int64_t file = dataset()->input(kUnitsInput).matrix<int64_t>()(unit, 0);
    VerifiedShards& cache = dataset()->verified();
    if (shards_[file] == nullptr) {
      const auto identity = dataset()->input(kIdentitiesInput).matrix<int64_t>();
      const std::string path(dataset()->input(kFilesInput).flat<tf::tstring>()(file));
      std::lock_guard<std::mutex> lock(cache.mu);
      std::string error;
      if (cache.shards[file] == nullptr) {
        auto shard = std::make_shared<MappedShard>();
        error = shard->Map(path, identity(file, 0), identity(file, 1), identity(file, 2));
        if (error.empty()) cache.shards[file] = std::move(shard);
      } else {
        int64_t ctime_ns = 0;
        error = MappedShard::Unchanged(path, identity(file, 0), identity(file, 1), identity(file, 2), &ctime_ns);
        if (error.empty() && ctime_ns != cache.shards[file]->ctime_ns()) {  // touched since: check its units again
          const auto units = dataset()->input(kUnitsInput).matrix<int64_t>();
          for (int64_t u = 0; u < units.dimension(0); ++u) {
            if (units(u, 0) == file) cache.verified[u] = false;
          }
          cache.shards[file]->set_ctime_ns(ctime_ns);
        }
      }
      if (!error.empty()) return absl::FailedPreconditionError(error);
      shards_[file] = cache.shards[file];
    }
    if (!verified_[unit]) {
      std::lock_guard<std::mutex> lock(cache.mu);
      if (!cache.verified[unit]) TF_RETURN_IF_ERROR(Verify(unit));
      cache.verified[unit] = verified_[unit] = true;
    }
    return absl::OkStatus();
  }

  // Every column of the batch's n rows into `canonical` (features, then dense columns), the entries
  // dropped by the capacities added to *dropped. Columns are independent: past kParallelCells
  // cells, threads of tf.data's pool take them one at a time beside this one, which also takes
  // any no thread has started, so the wait never depends on the pool having a free thread. The
  // first error, in column order, is returned.
  absl::Status WriteColumns(IteratorContext* ctx, int64_t n, std::vector<Tensor>* canonical, int64_t* dropped) {
    const ElementLayout& e = dataset()->element();
    const int64_t columns = e.features() + e.dense();
    std::vector<absl::Status> status(columns);
    std::vector<int64_t> lost(columns, 0);
    auto write = [&](int64_t c, Scratch& scratch) {
      if (c < e.features()) {
        const int64_t g = e.feature_group[c];
        status[c] = WriteFeature(ctx, scratch, c, static_cast<int>(e.combiners[g]), e.id_types[g], n, &lost[c],
                                 &(*canonical)[4 * c]);
      } else {
        const int64_t j = c - e.features();
        status[c] = WriteDense(ctx, scratch, j, e.dense_types[j], n, &(*canonical)[4 * e.features() + j]);
      }
    };
    const int threads = ctx->runner_threadpool_size();
    const int writers = n * columns < kParallelCells || threads < 2
                            ? 1
                            : static_cast<int>(std::min<int64_t>({kMaxWriters, threads, columns}));
    if (static_cast<int>(scratch_.size()) < writers) scratch_.resize(writers);
    if (writers == 1) {
      for (int64_t c = 0; c < columns; ++c) write(c, scratch_[0]);
    } else {
      struct Shared {
        std::atomic<int64_t> next{0};
        std::mutex mu;
        std::condition_variable done;
        int64_t finished = 0;
      };
      auto shared = std::make_shared<Shared>();
      auto take = [shared, columns, &write](Scratch& scratch) {
        for (int64_t c; (c = shared->next.fetch_add(1)) < columns;) {
          write(c, scratch);
          std::lock_guard<std::mutex> lock(shared->mu);
          if (++shared->finished == columns) shared->done.notify_all();
        }
      };
      for (int w = 1; w < writers; ++w) {
        // A helper that starts after every column was taken touches only `shared`.
        (*ctx->runner())([shared, columns, take, scratch = &scratch_[w]]() mutable {
          if (shared->next.load() < columns) take(*scratch);
        });
      }
      take(scratch_[0]);
      std::unique_lock<std::mutex> lock(shared->mu);
      shared->done.wait(lock, [&] { return shared->finished == columns; });
    }
    for (int64_t c = 0; c < columns; ++c) {
      TF_RETURN_IF_ERROR(status[c]);
      *dropped += lost[c];
    }
    return absl::OkStatus();
  }

  // Feature f's entries of the batch's n rows into out[0..3] (row_ids, col_ids, gains, sample count):
  // with a capacity, padded to it with (row n, id 0, gain 0), as `pad_coo_features` pads; more
  // entries than the capacity are refused with its message, or (drop_overflow) the first `capacity`
  // kept and the rest added to *dropped. The kernel writes straight into the outputs unless the
  // capacity is below the room its entries may need.
  absl::Status WriteFeature(IteratorContext* ctx, Scratch& scratch, int64_t f, int combiner, tf::DataType id_type,
                            int64_t n, int64_t* dropped, Tensor* out) const {
    Describe(scratch, kListsInput, f, kArrowListFields, {kArrowOffsets, kArrowValidity, kArrowIds, kArrowWeights});
    SharedWeights(scratch, f);
    const int64_t room = sparseflow_arrow_lists_room(scratch.descriptors.data(), 1, Pieces(), begins_.data(),
                                                     counts_.data(), index_.data(), scratch.error);
    if (room < 0) return Failure(scratch, f);
    const int64_t capacity = dataset()->element().capacities[f];
    const bool direct = capacity < 0 || capacity >= room;
    const int64_t size = capacity < 0 ? room : capacity;
    Tensor rows(ctx->allocator({}), tf::DT_INT32, {size}), ids(ctx->allocator({}), id_type, {size}),
        gains(ctx->allocator({}), tf::DT_FLOAT, {size}), samples(ctx->allocator({}), tf::DT_INT32, {});
    const int64_t id_size = tf::DataTypeSize(id_type);
    if (!direct) {
      scratch.rows.resize(room);
      scratch.ids.resize(room);
      scratch.gains.resize(room);
    }
    int32_t* to_rows = direct ? rows.flat<int32_t>().data() : scratch.rows.data();
    void* to_ids = direct ? ids.data() : static_cast<void*>(scratch.ids.data());
    float* to_gains = direct ? gains.flat<float>().data() : scratch.gains.data();
    int64_t entries;
    const int64_t written =
        id_type == tf::DT_INT64
            ? sparseflow_arrow_lists_to_coo_i64(scratch.descriptors.data(), scratch.weights.data(), 1, Pieces(),
                                                begins_.data(), counts_.data(), index_.data(), combiner, room, to_rows,
                                                static_cast<int64_t*>(to_ids), to_gains, &entries, scratch.error)
            : sparseflow_arrow_lists_to_coo_i32(scratch.descriptors.data(), scratch.weights.data(), 1, Pieces(),
                                                begins_.data(), counts_.data(), index_.data(), combiner, room, to_rows,
                                                static_cast<int32_t*>(to_ids), to_gains, &entries, scratch.error);
    if (written < 0) return Failure(scratch, f);
    samples.scalar<int32_t>()() = static_cast<int32_t>(n);
    out[3] = std::move(samples);
    if (capacity < 0) {  // merged entries are fewer than the room: the first `written` (a slice shares the buffer)
      out[0] = rows.Slice(0, written);
      out[1] = ids.Slice(0, written);
      out[2] = gains.Slice(0, written);
      return absl::OkStatus();
    }
    if (written > capacity) {
      if (!dataset()->element().drop_overflow) return Overflow(f, written, capacity);
      *dropped += written - capacity;
    }
    const int64_t kept = std::min(written, capacity);
    if (!direct) {
      std::memcpy(rows.data(), to_rows, kept * sizeof(int32_t));
      std::memcpy(ids.data(), to_ids, kept * id_size);
      std::memcpy(gains.data(), to_gains, kept * sizeof(float));
    }
    std::fill(rows.flat<int32_t>().data() + kept, rows.flat<int32_t>().data() + capacity, static_cast<int32_t>(n));
    std::memset(static_cast<char*>(ids.data()) + kept * id_size, 0, (capacity - kept) * id_size);
    std::fill(gains.flat<float>().data() + kept, gains.flat<float>().data() + capacity, 0.0f);
    out[0] = std::move(rows);
    out[1] = std::move(ids);
    out[2] = std::move(gains);
    return absl::OkStatus();
  }

  // Dense column j (the label is the last) of the batch's n rows: NaN, or the missing int, where null.
  absl::Status WriteDense(IteratorContext* ctx, Scratch& scratch, int64_t j, tf::DataType type, int64_t n,
                          Tensor* out) const {
    Describe(scratch, kDenseInput, j, kArrowDenseFields, {kArrowValues, kArrowDenseValidity});
    Tensor values(ctx->allocator({}), type, {n});
    const int64_t item = tf::DataTypeSize(type);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const float nan32 = std::numeric_limits<float>::quiet_NaN();
    const int64_t missing_int = dataset()->missing_int();
    const void* missing = type == tf::DT_INT64 ? static_cast<const void*>(&missing_int)
                          : item == 8          ? static_cast<const void*>(&nan)
                                               : static_cast<const void*>(&nan32);
    if (sparseflow_arrow_dense_rows(scratch.descriptors.data(), 1, Pieces(), begins_.data(), counts_.data(),
                                    index_.data(), item, missing, values.data(), n, scratch.error) < 0) {
      return Failure(scratch, dataset()->element().features() + j);
    }
    *out = std::move(values);
    return absl::OkStatus();
  }

  // `pad_coo_features`'s refusal of a batch that needs more entries than a capacity.
  absl::Status Overflow(int64_t f, int64_t entries, int64_t capacity) const {
    return absl::InvalidArgumentError(
        "pad_to_capacity: check 'capacity' failed: feature '" +
        std::string(dataset()->input(kNamesInput).flat<tf::tstring>()(f)) + "' has " + std::to_string(entries) +
        " COO entries, more than its capacity " + std::to_string(capacity) +
        " (raise the capacity, or pass overflow='drop')");
  }

  // The unit's record batch against its checksum (what `ArrowShard.read_unit` checks at its first
  // read of a batch), with that reader's message: the CRC-32C of the batch's buffers, extended from
  // the CRC of its metadata, must be the one stored.
  absl::Status Verify(int64_t unit) {
    const auto checks = dataset()->input(kChecksInput).matrix<int64_t>();
    const auto spans = dataset()->input(kSpansInput).matrix<int64_t>();
    const auto units = dataset()->input(kUnitsInput).matrix<int64_t>();
    const uint8_t* base = shards_[units(unit, 0)]->base();
    uint32_t crc = static_cast<uint32_t>(checks(unit, 1));
    for (int64_t s = checks(unit, 2); s < checks(unit, 2) + checks(unit, 3); ++s) {
      crc = Crc32cExtend(crc, base + spans(s, 0), static_cast<size_t>(spans(s, 1)));
    }
    if (crc != static_cast<uint32_t>(checks(unit, 0))) {
      char found[9], stored[9];
      std::snprintf(found, sizeof(found), "%08x", crc);
      std::snprintf(stored, sizeof(stored), "%08x", static_cast<uint32_t>(checks(unit, 0)));
      return absl::InvalidArgumentError(std::string(dataset()->input(kFilesInput).flat<tf::tstring>()(units(unit, 0))) +
                                        ": record batch " + std::to_string(units(unit, 1)) + ": checksum " + found +
                                        " differs from the stored " + stored);
    }
    return absl::OkStatus();
  }

  // Column `column`'s descriptors for every piece, with the file offsets at `addresses` turned into
  // addresses of the mapped shard (an offset 0 is "none" and stays 0).
  void Describe(Scratch& scratch, int input, int64_t column, int64_t fields,
                std::initializer_list<int> addresses) const {
    const Tensor& table = dataset()->input(input);
    const int64_t per_unit = table.dim_size(1);
    const int64_t* all = table.flat<int64_t>().data();
    scratch.descriptors.resize(Pieces() * fields);
    for (int64_t p = 0; p < Pieces(); ++p) {
      const int64_t file = dataset()->input(kUnitsInput).matrix<int64_t>()(units_[p], 0);
      const int64_t base = reinterpret_cast<int64_t>(shards_[file]->base());
      int64_t* d = &scratch.descriptors[p * fields];
      std::memcpy(d, all + (units_[p] * per_unit + column) * fields, fields * sizeof(int64_t));
      for (int field : addresses) {
        if (d[field] != 0) d[field] += base;
      }
    }
  }

  void SharedWeights(Scratch& scratch, int64_t column) const {
    const Tensor& table = dataset()->input(kWeightsInput);
    const int64_t per_unit = table.dim_size(1);
    scratch.weights.resize(Pieces());
    for (int64_t p = 0; p < Pieces(); ++p) scratch.weights[p] = table.flat<float>()(units_[p] * per_unit + column);
  }

  // The Python reader's message for column `column`'s last kernel error: "<unit>: column 'x' row r: what".
  absl::Status Failure(const Scratch& scratch, int64_t column) const {
    const int64_t piece = scratch.error[1];
    const auto units = dataset()->input(kUnitsInput).matrix<int64_t>();
    const int64_t unit = units_[piece];
    const std::string where = std::string(dataset()->input(kFilesInput).flat<tf::tstring>()(units(unit, 0))) +
                              " record batch " + std::to_string(units(unit, 1));
    const std::string name(dataset()->input(kNamesInput).flat<tf::tstring>()(column));
    return absl::InvalidArgumentError(where + ": column '" + name + "' row " + std::to_string(scratch.error[2]) +
                                      ": " + ArrowKernelError(scratch.error[0]));
  }

  std::mutex mu_;
  RowPlan plan_;  // the dataset's, with this iterator's seed and cached orders
  int64_t next_ = 0;
  std::vector<std::shared_ptr<MappedShard>> shards_;  // per file: the dataset's mapping, once this iterator checked it
  std::vector<bool> verified_;                        // per unit: known to be checked (`Ready`)
  // Under the tf.data service's split by units: the provider, the unit being read (its index in
  // the split order, and in the plan), the next row of it, and whether the provider ran out.
  std::shared_ptr<tf::SplitProvider> splits_;
  int64_t split_ = -1, unit_ = -1, unit_row_ = 0;
  bool splits_done_ = false;
  std::vector<int64_t> units_, begins_, counts_, index_;
  std::vector<Scratch> scratch_;  // one per thread writing the batch's columns
};

std::unique_ptr<tf::IteratorBase> ArrowDataset::MakeIteratorInternal(const std::string& prefix) const {
  return std::make_unique<Iterator>(Iterator::Params{this, prefix + "::SparseflowArrow"});
}

class ArrowDatasetOp : public tf::DatasetOpKernel {
 public:
  explicit ArrowDatasetOp(tf::OpKernelConstruction* ctx) : tf::DatasetOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, element_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_types", &types_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_shapes", &shapes_));
  }

 protected:
  void MakeDataset(tf::OpKernelContext* ctx, DatasetBase** output) override {
    std::vector<Tensor> inputs;
    for (int k = 0; k < ArrowDataset::kInputs; ++k) inputs.push_back(ctx->input(k));
    OP_REQUIRES_OK(ctx, CheckElement());
    OP_REQUIRES_OK(ctx, Check(inputs));
    *output = new ArrowDataset(ctx, std::move(inputs), element_, types_, shapes_);
  }

 private:
  // The attributes agree: one combiner and id type a group, a capacity a feature, and each output
  // a canonical component of its type.
  absl::Status CheckElement() const {
    const ElementLayout& e = element_;
    int64_t features = 0;
    for (int64_t f : e.group_sizes) features += f;
    if (e.combiners.size() != e.group_sizes.size() || e.id_types.size() != e.group_sizes.size() ||
        features != e.features() || types_.size() != e.components.size() || shapes_.size() != types_.size())
      return absl::InvalidArgumentError("SparseflowArrowDataset: attributes of different lengths");
    for (tf::DataType t : e.id_types) {
      if (t != tf::DT_INT64 && t != tf::DT_INT32)
        return absl::InvalidArgumentError("SparseflowArrowDataset: ids must be int64 or int32");
    }
    for (tf::DataType t : e.dense_types) {
      if (t != tf::DT_INT64 && t != tf::DT_FLOAT && t != tf::DT_DOUBLE && t != tf::DT_INT32)
        return absl::InvalidArgumentError("SparseflowArrowDataset: a dense column of an unsupported type");
    }
    for (size_t k = 0; k < types_.size(); ++k) {
      if (e.Type(e.components[k]) != types_[k])
        return absl::InvalidArgumentError("SparseflowArrowDataset: output " + std::to_string(k) +
                                          " is not of its component's type");
    }
    return absl::OkStatus();
  }

  // The plan's shapes agree with the attributes, and every buffer lies inside its file.
  absl::Status Check(const std::vector<Tensor>& in) const {
    using D = ArrowDataset;
    const int64_t lists = element_.features(), dense = element_.dense();
    const int64_t files = in[D::kFilesInput].NumElements();
    if (in[D::kUnitsInput].dims() != 2 || in[D::kUnitsInput].dim_size(1) != 3)
      return absl::InvalidArgumentError("SparseflowArrowDataset: units must be [units, 3]");
    const int64_t units = in[D::kUnitsInput].dim_size(0);
    const auto shaped = [&](int k, std::vector<int64_t> dims) {
      if (in[k].dims() != static_cast<int>(dims.size())) return false;
      for (size_t i = 0; i < dims.size(); ++i) {
        if (in[k].dim_size(i) != dims[i]) return false;
      }
      return true;
    };
    if (!shaped(D::kFilesInput, {files}) || !shaped(D::kIdentitiesInput, {files, 3}) ||
        !shaped(D::kListsInput, {units, lists, kArrowListFields}) || !shaped(D::kWeightsInput, {units, lists}) ||
        !shaped(D::kDenseInput, {units, dense, kArrowDenseFields}) || !shaped(D::kNamesInput, {lists + dense}) ||
        !shaped(D::kSettingsInput, {kSettings}) || !shaped(D::kChecksInput, {units, 4}) ||
        in[D::kSpansInput].dims() != 2 || in[D::kSpansInput].dim_size(1) != 2)
      return absl::InvalidArgumentError("SparseflowArrowDataset: the plan's tensors do not match its attributes");
    const auto settings = in[D::kSettingsInput].vec<int64_t>();
    if (settings(kBatchSize) <= 0 || settings(kStartEpoch) < 0 || settings(kStartRow) < 0)
      return absl::InvalidArgumentError("SparseflowArrowDataset: a bad batch size or start");
    const auto unit_table = in[D::kUnitsInput].matrix<int64_t>();
    const auto identities = in[D::kIdentitiesInput].matrix<int64_t>();
    std::vector<int64_t> id_sizes, dense_items;
    for (tf::DataType t : element_.id_types) id_sizes.push_back(tf::DataTypeSize(t));
    for (tf::DataType t : element_.dense_types) dense_items.push_back(tf::DataTypeSize(t));
    for (int64_t u = 0; u < units; ++u) {
      const int64_t file = unit_table(u, 0);
      if (file < 0 || file >= files || unit_table(u, 2) < 0)
        return absl::InvalidArgumentError("SparseflowArrowDataset: a unit of no file");
      const UnitPlan unit{in[D::kListsInput].flat<int64_t>().data() + u * lists * kArrowListFields,
                          in[D::kDenseInput].flat<int64_t>().data() + u * dense * kArrowDenseFields,
                          in[D::kListsInput].flat<int64_t>().data(),
                          in[D::kChecksInput].flat<int64_t>().data() + u * 4,
                          in[D::kSpansInput].flat<int64_t>().data(),
                          in[D::kSpansInput].dim_size(0),
                          identities(file, 0)};
      int64_t column;
      const std::string problem = CheckUnit(unit, element_.group_sizes, id_sizes, dense_items, &column);
      if (!problem.empty()) return Refusal(in, u, column, problem);
    }
    return absl::OkStatus();
  }

  static absl::Status Refusal(const std::vector<Tensor>& in, int64_t unit, int64_t column, const std::string& what) {
    const auto units = in[ArrowDataset::kUnitsInput].matrix<int64_t>();
    return absl::InvalidArgumentError(
        std::string(in[ArrowDataset::kFilesInput].flat<tf::tstring>()(units(unit, 0))) + " record batch " +
        std::to_string(units(unit, 1)) +
        (column < 0 ? ""
                    : ": column '" + std::string(in[ArrowDataset::kNamesInput].flat<tf::tstring>()(column)) + "'") +
        ": the plan names " + what);
  }

  ElementLayout element_;
  tf::DataTypeVector types_;
  std::vector<tf::PartialTensorShape> shapes_;
};

REGISTER_KERNEL_BUILDER(Name("SparseflowArrowDataset").Device(tf::DEVICE_CPU), ArrowDatasetOp);

}  // namespace arrow_dataset
}  // namespace sparseflow
