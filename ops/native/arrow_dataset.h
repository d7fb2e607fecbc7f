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

class ArrowDataset : public DatasetBase {
 public:
  ArrowDataset(tf::OpKernelContext* ctx, std::vector<Tensor> inputs, std::vector<int64_t> group_sizes,
               std::vector<int64_t> combiners, std::vector<int64_t> block_sizes, bool has_label,
               tf::DataTypeVector types, std::vector<tf::PartialTensorShape> shapes)
      : DatasetBase(tf::DatasetContext(ctx)),
        inputs_(std::move(inputs)),
        group_sizes_(std::move(group_sizes)),
        combiners_(std::move(combiners)),
        block_sizes_(std::move(block_sizes)),
        has_label_(has_label),
        types_(std::move(types)),
        shapes_(std::move(shapes)) {
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
  const std::vector<int64_t>& group_sizes() const { return group_sizes_; }
  const std::vector<int64_t>& combiners() const { return combiners_; }
  const std::vector<int64_t>& block_sizes() const { return block_sizes_; }
  bool has_label() const { return has_label_; }
  int64_t missing_int() const { return missing_int_; }

 protected:
  absl::Status AsGraphDefInternal(tf::SerializationContext*, DatasetGraphDefBuilder* b,
                                  tf::Node** output) const override {
    std::vector<tf::Node*> nodes(kInputs);
    for (int k = 0; k < kInputs; ++k) TF_RETURN_IF_ERROR(b->AddTensor(inputs_[k], &nodes[k]));
    auto list = [&](const std::vector<int64_t>& values) {
      tf::AttrValue value;
      for (int64_t v : values) value.mutable_list()->add_i(v);
      return value;
    };
    tf::AttrValue label;
    label.set_b(has_label_);
    return b->AddDataset(this, nodes,
                         {{"group_sizes", list(group_sizes_)}, {"group_combiners", list(combiners_)},
                          {"block_sizes", list(block_sizes_)}, {"has_label", label}},
                         output);
  }

 private:
  class Iterator;

  const std::vector<Tensor> inputs_;
  const std::vector<int64_t> group_sizes_, combiners_, block_sizes_;
  const bool has_label_;
  const tf::DataTypeVector types_;
  const std::vector<tf::PartialTensorShape> shapes_;
  RowPlan plan_;
  int64_t num_epochs_ = -1;
  int64_t missing_int_ = 0;
};

}  // namespace arrow_dataset
}  // namespace sparseflow

#endif  // SPARSEFLOW_NATIVE_ARROW_DATASET_H_
