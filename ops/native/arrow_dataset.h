// SparseflowArrowDataset's dataset (see arrow_dataset_op.cc, which alone includes this): its plan
// as the op's input tensors, its element layout as attributes, its row plan, and the split of an
// epoch by units that the tf.data service hands out (`distributed_epoch`).
#ifndef SPARSEFLOW_NATIVE_ARROW_DATASET_H_
#define SPARSEFLOW_NATIVE_ARROW_DATASET_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arrow_dataset_plan.h"
#include "tensorflow/core/framework/dataset.h"

namespace sparseflow {
namespace arrow_dataset {

// TensorFlow's names and tf.data's, under one prefix.
namespace tf {
using namespace ::tensorflow;        // NOLINT
using namespace ::tensorflow::data;  // NOLINT
}  // namespace tf
using tf::DatasetBase;
using tf::IteratorContext;
using tf::Tensor;

// settings: batch_size, drop_remainder, num_epochs (negative: endless), start_epoch, start_row,
// fingerprint, the int64 a missing integer reads as, shuffle, seed.
enum Setting {
  kBatchSize, kDropRemainder, kNumEpochs, kStartEpoch, kStartRow, kFingerprint, kMissingInt, kShuffle, kSeed, kSettings
};

// The tf.data service's split of an epoch by units (`distributed_epoch`): unit k of epoch 0's
// order to whichever worker asks next.
class UnitSplits : public tf::SplitProvider {
 public:
  explicit UnitSplits(int64_t units) : units_(units) {}
  absl::Status GetNext(Tensor* split, bool* end_of_splits) override {
    std::lock_guard<std::mutex> lock(mu_);
    *end_of_splits = next_ >= units_;
    if (!*end_of_splits) {
      *split = Tensor(tf::DT_INT64, tf::TensorShape({}));
      split->scalar<int64_t>()() = next_++;
    }
    return absl::OkStatus();
  }
  absl::Status Reset() override {
    std::lock_guard<std::mutex> lock(mu_);
    next_ = 0;
    return absl::OkStatus();
  }
  absl::Status Save(std::function<std::string(std::string)> full_name, tf::IteratorStateWriter* writer) override {
    std::lock_guard<std::mutex> lock(mu_);
    return writer->WriteScalar(full_name("next"), next_);
  }
  absl::Status Restore(std::function<std::string(std::string)> full_name, tf::IteratorStateReader* reader) override {
    std::lock_guard<std::mutex> lock(mu_);
    return reader->ReadScalar(full_name("next"), &next_);
  }
  int64_t Cardinality() const override { return units_; }

 private:
  std::mutex mu_;
  const int64_t units_;
  int64_t next_ = 0;
};

// The element the op writes, as attributes: per group of features its size, combiner and id type;
// per feature its capacity (-1: not padded); each dense column's type (the label's last); and the
// outputs, each a component of the canonical order: per feature (in group order) row_ids int32,
// col_ids, gains float32 and its sample count int32 []; per dense column its [n] values; the
// position int64 [4]; the entries dropped by the capacities, int64 [].
struct ElementLayout {
  std::vector<int64_t> group_sizes, combiners, capacities, components;
  std::vector<int64_t> feature_group;  // per feature, its group (from group_sizes)
  tf::DataTypeVector id_types, dense_types;
  bool drop_overflow = false;

  int64_t features() const { return static_cast<int64_t>(capacities.size()); }
  int64_t dense() const { return static_cast<int64_t>(dense_types.size()); }
  int64_t position() const { return 4 * features() + dense(); }
  int64_t dropped() const { return position() + 1; }
  int64_t canonical() const { return position() + 2; }

  // The type of canonical component `k` (DT_INVALID past the end).
  tf::DataType Type(int64_t k) const {
    if (k < 0 || k >= canonical()) return tf::DT_INVALID;
    if (k >= position()) return tf::DT_INT64;
    if (k >= 4 * features()) return dense_types[k - 4 * features()];
    if (k % 4 == 1) {
      const size_t f = k / 4;
      return f < feature_group.size() ? id_types[feature_group[f]] : tf::DT_INVALID;
    }
    return k % 4 == 2 ? tf::DT_FLOAT : tf::DT_INT32;
  }

  absl::Status Read(tf::OpKernelConstruction* ctx) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("group_sizes", &group_sizes));
    TF_RETURN_IF_ERROR(ctx->GetAttr("group_combiners", &combiners));
    TF_RETURN_IF_ERROR(ctx->GetAttr("capacities", &capacities));
    TF_RETURN_IF_ERROR(ctx->GetAttr("components", &components));
    TF_RETURN_IF_ERROR(ctx->GetAttr("id_types", &id_types));
    TF_RETURN_IF_ERROR(ctx->GetAttr("dense_types", &dense_types));
    for (size_t g = 0; g < group_sizes.size(); ++g) feature_group.insert(feature_group.end(), group_sizes[g], g);
    return ctx->GetAttr("drop_overflow", &drop_overflow);
  }

  void Write(std::vector<std::pair<tf::StringPiece, tf::AttrValue>>* attrs) const {
    auto list = [](const std::vector<int64_t>& values) {
      tf::AttrValue value;
      for (int64_t v : values) value.mutable_list()->add_i(v);
      return value;
    };
    auto types = [](const tf::DataTypeVector& values) {
      tf::AttrValue value;
      for (tf::DataType v : values) value.mutable_list()->add_type(v);
      return value;
    };
    tf::AttrValue drop;
    drop.set_b(drop_overflow);
    *attrs = {{"group_sizes", list(group_sizes)}, {"group_combiners", list(combiners)},
              {"capacities", list(capacities)},   {"components", list(components)},
              {"id_types", types(id_types)},       {"dense_types", types(dense_types)},
              {"drop_overflow", drop}};
  }
};

// What every iterator of one dataset shares: the shards mapped, and which units' checksums were
// checked, so a new iterator (each epoch's, a restored one) neither maps nor checks them again.
struct VerifiedShards {
  std::mutex mu;
  std::vector<std::shared_ptr<MappedShard>> shards;  // per file, once mapped
  std::vector<bool> verified;                         // per unit
};

class ArrowDataset : public DatasetBase {
 public:
  ArrowDataset(tf::OpKernelContext* ctx, std::vector<Tensor> inputs, ElementLayout element, tf::DataTypeVector types,
               std::vector<tf::PartialTensorShape> shapes)
      : DatasetBase(tf::DatasetContext(ctx)),
        inputs_(std::move(inputs)),
        element_(std::move(element)),
        types_(std::move(types)),
        shapes_(std::move(shapes)),
        verified_(std::make_shared<VerifiedShards>()) {
    const auto settings = inputs_[kSettingsInput].vec<int64_t>();
    plan_.batch_size = settings(kBatchSize);
    plan_.drop_remainder = settings(kDropRemainder) != 0;
    plan_.start_epoch = settings(kStartEpoch);
    plan_.start_row = settings(kStartRow);
    plan_.fingerprint = settings(kFingerprint);
    plan_.shuffle = settings(kShuffle) != 0;
    plan_.seed = static_cast<uint64_t>(settings(kSeed));
    num_epochs_ = settings(kNumEpochs);
    missing_int_ = settings(kMissingInt);
    const auto units = inputs_[kUnitsInput].matrix<int64_t>();
    std::vector<int64_t> rows(units.dimension(0));
    for (size_t k = 0; k < rows.size(); ++k) rows[k] = units(k, 2);
    plan_.SetUnits(std::move(rows));
    verified_->shards.resize(inputs_[kFilesInput].NumElements());
    verified_->verified.assign(inputs_[kUnitsInput].dim_size(0), false);
  }

  // The inputs, in the op's order.
  enum Input { kFilesInput, kIdentitiesInput, kUnitsInput, kListsInput, kWeightsInput, kDenseInput, kNamesInput,
               kChecksInput, kSpansInput, kSettingsInput, kInputs };

  std::unique_ptr<tf::IteratorBase> MakeIteratorInternal(const std::string& prefix) const override;
  const tf::DataTypeVector& output_dtypes() const override { return types_; }
  const std::vector<tf::PartialTensorShape>& output_shapes() const override { return shapes_; }
  std::string DebugString() const override { return "SparseflowArrowDatasetOp::Dataset"; }
  int64_t CardinalityInternal(tf::CardinalityOptions) const override {
    const int64_t n = plan_.NumBatches(num_epochs_);
    return n < 0 ? tf::data::kInfiniteCardinality : n;
  }
  absl::Status InputDatasets(std::vector<const DatasetBase*>* inputs) const override {
    inputs->clear();
    return absl::OkStatus();
  }
  absl::Status CheckExternalState() const override { return absl::OkStatus(); }
  absl::Status MakeSplitProviders(std::vector<std::unique_ptr<tf::SplitProvider>>* providers) const override {
    providers->push_back(std::make_unique<UnitSplits>(plan_.NumUnits()));
    return absl::OkStatus();
  }

  const RowPlan& plan() const { return plan_; }
  int64_t num_epochs() const { return num_epochs_; }
  const Tensor& input(int k) const { return inputs_[k]; }
  const ElementLayout& element() const { return element_; }
  int64_t missing_int() const { return missing_int_; }
  VerifiedShards& verified() const { return *verified_; }

 protected:
  absl::Status AsGraphDefInternal(tf::SerializationContext*, DatasetGraphDefBuilder* b,
                                  tf::Node** output) const override {
    std::vector<tf::Node*> nodes(kInputs);
    for (int k = 0; k < kInputs; ++k) TF_RETURN_IF_ERROR(b->AddTensor(inputs_[k], &nodes[k]));
    std::vector<std::pair<tf::StringPiece, tf::AttrValue>> attrs;
    element_.Write(&attrs);
    return b->AddDataset(this, nodes, attrs, output);
  }

 private:
  class Iterator;

  const std::vector<Tensor> inputs_;
  const ElementLayout element_;
  const tf::DataTypeVector types_;
  const std::vector<tf::PartialTensorShape> shapes_;
  RowPlan plan_;
  int64_t num_epochs_ = -1;
  int64_t missing_int_ = 0;
  const std::shared_ptr<VerifiedShards> verified_;
};

}  // namespace arrow_dataset
}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_ARROW_DATASET_H_
