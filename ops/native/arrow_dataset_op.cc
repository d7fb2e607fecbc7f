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
// Element: per group of F features, row_ids int32, col_ids (int64 or int32), gains float32 and the
// entries per feature int64 [F]; per dense block of D columns its [D * n] values; the label [n];
// the rows int64 [1]; the position after the batch int64 [4].

#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arrow_batch_kernels.h"
#include "arrow_dataset.h"
#include "arrow_dataset_plan.h"
#include "arrow_plan_check.h"
#include "tensorflow/core/framework/dataset.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "xla/tsl/lib/hash/crc32c.h"

namespace sparseflow {
namespace arrow_dataset {

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
    for (int64_t unit : units_) {
      TF_RETURN_IF_ERROR(MapUnit(unit));
      if (!verified_[unit]) TF_RETURN_IF_ERROR(Verify(unit));
    }
    const int64_t n = end - begin;
    const auto& types = d.output_dtypes();
    int64_t column = 0;  // the first descriptor (of lists, then of dense columns) of the current call
    size_t output = 0;
    for (size_t g = 0; g < d.group_sizes().size(); ++g) {
      const int64_t features = d.group_sizes()[g];
      Describe(kListsInput, column, features, kArrowListFields, {kArrowOffsets, kArrowValidity, kArrowIds,
                                                                 kArrowWeights});
      Shared(column, features);
      const int64_t room = sparseflow_arrow_lists_room(descriptors_.data(), features, Pieces(), begins_.data(),
                                                       counts_.data(), index_.data(), error_);
      if (room < 0) return Failure(column, features);
      Tensor rows(ctx->allocator({}), tf::DT_INT32, {room}), ids(ctx->allocator({}), types[output + 1], {room}),
          gains(ctx->allocator({}), tf::DT_FLOAT, {room}), per_feature(ctx->allocator({}), tf::DT_INT64, {features});
      const int combiner = static_cast<int>(d.combiners()[g]);
      const int64_t written =
          types[output + 1] == tf::DT_INT64
              ? sparseflow_arrow_lists_to_coo_i64(
                    descriptors_.data(), weights_.data(), features, Pieces(), begins_.data(), counts_.data(),
                    index_.data(), combiner, room, rows.flat<int32_t>().data(), ids.flat<int64_t>().data(),
                    gains.flat<float>().data(), per_feature.flat<int64_t>().data(), error_)
              : sparseflow_arrow_lists_to_coo_i32(
                    descriptors_.data(), weights_.data(), features, Pieces(), begins_.data(), counts_.data(),
                    index_.data(), combiner, room, rows.flat<int32_t>().data(), ids.flat<int32_t>().data(),
                    gains.flat<float>().data(), per_feature.flat<int64_t>().data(), error_);
      if (written < 0) return Failure(column, features);
      // Merged entries are fewer than the ids: the arrays' first `written` (a slice shares the buffer).
      out->push_back(rows.Slice(0, written));
      out->push_back(ids.Slice(0, written));
      out->push_back(gains.Slice(0, written));
      out->push_back(std::move(per_feature));
      output += 4;
      column += features;
    }
    const int64_t lists = column;
    std::vector<int64_t> blocks = d.block_sizes();
    if (d.has_label()) blocks.push_back(1);
    int64_t dense_column = 0;
    for (int64_t columns : blocks) {
      Describe(kDenseInput, dense_column, columns, kArrowDenseFields, {kArrowValues, kArrowDenseValidity});
      const tf::DataType type = types[output];
      Tensor values(ctx->allocator({}), type, {columns * n});
      const int64_t item = tf::DataTypeSize(type);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const float nan32 = std::numeric_limits<float>::quiet_NaN();
      const int64_t missing_int = d.missing_int();
      const void* missing = type == tf::DT_INT64 ? static_cast<const void*>(&missing_int)
                            : item == 8          ? static_cast<const void*>(&nan)
                                                 : static_cast<const void*>(&nan32);
      const int64_t status = sparseflow_arrow_dense_rows(descriptors_.data(), columns, Pieces(), begins_.data(),
                                                         counts_.data(), index_.data(), item, missing,
                                                         values.data(), n, error_);
      if (status < 0) return Failure(lists + dense_column, columns);
      out->push_back(std::move(values));
      ++output;
      dense_column += columns;
    }
    Tensor rows(ctx->allocator({}), tf::DT_INT64, {1}), position(ctx->allocator({}), tf::DT_INT64, {4});
    rows.flat<int64_t>()(0) = n;
    if (splits_ == nullptr) {
      plan_.Position(epoch, end, position.flat<int64_t>().data());
    } else {  // where this worker is in the unit it reads: not a position the plan resumes at
      auto p = position.flat<int64_t>();
      p(0) = 0, p(1) = split_, p(2) = unit_row_, p(3) = plan_.fingerprint;
    }
    out->push_back(std::move(rows));
    out->push_back(std::move(position));
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

  absl::Status MapUnit(int64_t unit) {
    const int64_t file = dataset()->input(kUnitsInput).matrix<int64_t>()(unit, 0);
    if (shards_[file] != nullptr) return absl::OkStatus();
    const auto identities = dataset()->input(kIdentitiesInput).matrix<int64_t>();
    auto shard = std::make_unique<MappedShard>();
    const std::string error = shard->Map(dataset()->input(kFilesInput).flat<tf::tstring>()(file),
                                         identities(file, 0), identities(file, 1), identities(file, 2));
    if (!error.empty()) return absl::FailedPreconditionError(error);
    shards_[file] = std::move(shard);
    return absl::OkStatus();
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
      crc = tsl::crc32c::Extend(crc, reinterpret_cast<const char*>(base + spans(s, 0)), spans(s, 1));
    }
    if (crc != static_cast<uint32_t>(checks(unit, 0))) {
      char found[9], stored[9];
      std::snprintf(found, sizeof(found), "%08x", crc);
      std::snprintf(stored, sizeof(stored), "%08x", static_cast<uint32_t>(checks(unit, 0)));
      return absl::InvalidArgumentError(std::string(dataset()->input(kFilesInput).flat<tf::tstring>()(units(unit, 0))) +
                                        ": record batch " + std::to_string(units(unit, 1)) + ": checksum " + found +
                                        " differs from the stored " + stored);
    }
    verified_[unit] = true;
    return absl::OkStatus();
  }

  // The descriptors of `count` columns from `first`, for every piece, with the file offsets at
  // `addresses` turned into addresses of the mapped shard (an offset 0 is "none" and stays 0).
  void Describe(int input, int64_t first, int64_t count, int64_t fields, std::initializer_list<int> addresses) {
    const Tensor& table = dataset()->input(input);
    const int64_t per_unit = table.dim_size(1);
    const int64_t* all = table.flat<int64_t>().data();
    descriptors_.resize(Pieces() * count * fields);
    for (int64_t p = 0; p < Pieces(); ++p) {
      const int64_t file = dataset()->input(kUnitsInput).matrix<int64_t>()(units_[p], 0);
      const int64_t base = reinterpret_cast<int64_t>(shards_[file]->base());
      for (int64_t c = 0; c < count; ++c) {
        int64_t* d = &descriptors_[(p * count + c) * fields];
        std::memcpy(d, all + (units_[p] * per_unit + first + c) * fields, fields * sizeof(int64_t));
        for (int field : addresses) {
          if (d[field] != 0) d[field] += base;
        }
      }
    }
  }

  void Shared(int64_t first, int64_t count) {
    const Tensor& table = dataset()->input(kWeightsInput);
    const int64_t per_unit = table.dim_size(1);
    weights_.resize(Pieces() * count);
    for (int64_t p = 0; p < Pieces(); ++p) {
      for (int64_t c = 0; c < count; ++c) {
        weights_[p * count + c] = table.flat<float>()(units_[p] * per_unit + first + c);
      }
    }
  }

  // The Python reader's message for the last kernel error: "<unit>: column 'x' row r: what".
  absl::Status Failure(int64_t first, int64_t count) const {
    const int64_t piece = error_[1] / count, column = first + error_[1] % count;
    const auto units = dataset()->input(kUnitsInput).matrix<int64_t>();
    const int64_t unit = units_[piece];
    const std::string where = std::string(dataset()->input(kFilesInput).flat<tf::tstring>()(units(unit, 0))) +
                              " record batch " + std::to_string(units(unit, 1));
    const std::string name(dataset()->input(kNamesInput).flat<tf::tstring>()(column));
    return absl::InvalidArgumentError(where + ": column '" + name + "' row " + std::to_string(error_[2]) + ": " +
                                      ArrowKernelError(error_[0]));
  }

  std::mutex mu_;
  RowPlan plan_;  // the dataset's, with this iterator's seed and cached orders
  int64_t next_ = 0;
  std::vector<std::unique_ptr<MappedShard>> shards_;
  std::vector<bool> verified_;  // per unit: its checksum checked by this iterator
  // Under the tf.data service's split by units: the provider, the unit being read (its index in
  // the split order, and in the plan), the next row of it, and whether the provider ran out.
  std::shared_ptr<tf::SplitProvider> splits_;
  int64_t split_ = -1, unit_ = -1, unit_row_ = 0;
  bool splits_done_ = false;
  std::vector<int64_t> units_, begins_, counts_, index_, descriptors_;
  std::vector<float> weights_;
  int64_t error_[3] = {0, 0, 0};
};

std::unique_ptr<tf::IteratorBase> ArrowDataset::MakeIteratorInternal(const std::string& prefix) const {
  return std::make_unique<Iterator>(Iterator::Params{this, prefix + "::SparseflowArrow"});
}

class ArrowDatasetOp : public tf::DatasetOpKernel {
 public:
  explicit ArrowDatasetOp(tf::OpKernelConstruction* ctx) : tf::DatasetOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("group_sizes", &group_sizes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("group_combiners", &combiners_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_sizes", &block_sizes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_label", &has_label_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_types", &types_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_shapes", &shapes_));
  }

 protected:
  void MakeDataset(tf::OpKernelContext* ctx, DatasetBase** output) override {
    std::vector<Tensor> inputs;
    for (int k = 0; k < ArrowDataset::kInputs; ++k) inputs.push_back(ctx->input(k));
    OP_REQUIRES_OK(ctx, Check(inputs));
    *output = new ArrowDataset(ctx, std::move(inputs), group_sizes_, combiners_, block_sizes_, has_label_, types_,
                               shapes_);
  }

 private:
  // The plan's shapes agree with the attributes, and every buffer lies inside its file.
  absl::Status Check(const std::vector<Tensor>& in) const {
    using D = ArrowDataset;
    int64_t lists = 0, dense = has_label_ ? 1 : 0;
    for (int64_t f : group_sizes_) lists += f;
    for (int64_t c : block_sizes_) dense += c;
    const size_t outputs = 4 * group_sizes_.size() + block_sizes_.size() + (has_label_ ? 1 : 0) + 2;
    const int64_t files = in[D::kFilesInput].NumElements();
    if (group_sizes_.size() != combiners_.size() || types_.size() != outputs || shapes_.size() != outputs)
      return absl::InvalidArgumentError("SparseflowArrowDataset: attributes of different lengths");
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
    for (size_t g = 0; g < group_sizes_.size(); ++g) id_sizes.push_back(tf::DataTypeSize(types_[4 * g + 1]));
    for (size_t b = 0; b < block_sizes_.size(); ++b) {
      dense_items.insert(dense_items.end(), block_sizes_[b], tf::DataTypeSize(types_[4 * group_sizes_.size() + b]));
    }
    if (has_label_) dense_items.push_back(tf::DataTypeSize(types_[outputs - 3]));
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
      const std::string problem = CheckUnit(unit, group_sizes_, id_sizes, dense_items, &column);
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

  std::vector<int64_t> group_sizes_, combiners_, block_sizes_;
  bool has_label_ = false;
  tf::DataTypeVector types_;
  std::vector<tf::PartialTensorShape> shapes_;
};

REGISTER_KERNEL_BUILDER(Name("SparseflowArrowDataset").Device(tf::DEVICE_CPU), ArrowDatasetOp);

}  // namespace arrow_dataset
}  // namespace sparseflow
