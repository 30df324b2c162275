// Plan page: pick a model (preset or Hugging Face folder), GPUs and nodes, device memory,
// strategy, precision, checkpointing, offload and batch shape; see the planner's memory per
// device by component for every strategy side by side against the device's capacity, the fit
// verdict, the largest micro-batch and fewest GPUs that fit, FLOPs and communication per step.
#pragma once

#include <optional>
#include <vector>

#include <QWidget>

#include <nlohmann/json.hpp>

#include "plan/engine_configs.h"
#include "plan/planner.h"

class QBoxLayout;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QLineEdit;
class QScrollArea;
class QSpinBox;
class QTableWidget;
class QTimer;
class QToolButton;

namespace shard::widgets {

class LoraFields;
class ParallelFields;
class MemoryBarChart;
class MessageBar;

class PlanPage : public QWidget {
    Q_OBJECT
public:
    explicit PlanPage(QWidget* parent = nullptr);

    // A preset name, or a folder holding config.json (loaded off the UI thread).
    void setModel(const QString& presetOrFolder);
    QString modelName() const;
    // Plans for a host's GPUs as its Hosts-page Test found them: the catalogue card of that
    // name (nvidia-smi's, e.g. "NVIDIA H200"), else a custom size of `memoryMiB`, and `count`
    // GPUs per node. Says which in the page's message.
    void useHostGpus(const QString& gpuName, double memoryMiB, int count);

    // The plan for the current fields (computed after a short debounce; recompute() forces it).
    void recompute();
    const std::vector<plan::PlanResult>& results() const { return m_results; }
    const plan::PlanResult* chosen() const;
    std::optional<plan::PlanInput> input() const { return m_input; }
    int64_t largestMicroBatch() const { return m_largestMicroBatch; }
    int64_t fewestGpus() const { return m_fewestGpus; }
    QString verdictText() const;
    QString messageText() const;
    MemoryBarChart* chart() const { return m_chart; }

    // Another engine's config as the plan: a DeepSpeed JSON, an accelerate YAML or a torchtitan
    // TOML (by its extension) sets the fields; "auto" values are filled from them. A DeepSpeed
    // config switches the accounting to DeepSpeed's with its buckets and knobs. What was
    // resolved, left out or not understood is shown in the page's message. False (and the
    // reason shown) when the file cannot be used; the fields are then left as they were.
    bool importConfig(const QString& path);
    QString importedConfig() const { return m_importedPath; }
    // The plan written for another engine: "deepspeed", "accelerate", "torchtitan" (configs),
    // "torchrun", "deepspeed-launch", "accelerate-launch" (commands), "sbatch" (a Slurm
    // script); empty text when there is no plan.
    plan::ExportedConfig exportFor(const QString& kind) const;
    // A dialog with the export, what it cannot say, and Save / Copy.
    void showExport(const QString& kind);

    void saveSettings() const;
    void loadSettings();
    void restyle();

Q_SIGNALS:
    void planChanged();
    // "Launch with these settings": the input and the model source (preset or folder).
    void launchRequested(const shard::plan::PlanInput& input, const QString& modelSource);
    void modelLoaded(const QString& name);
    void modelFailed(const QString& message);

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void scheduleRecompute();
    void browseFolder();
    void showDeviceMemory(); // the memory field and labels for the chosen device
    std::optional<plan::PlanInput> readFields(QString* error) const;
    // Plans every tensor x pipeline layout of the GPUs, sets the fastest that fits (and the
    // accumulation that keeps the global batch) and says why; when none fits, says which comes
    // closest.
    void recommendLayout();
    void showResults();
    QString suggestionsFor(const plan::PlanResult& chosen) const; // when it does not fit
    // The accounting used, the moment of the peak and the overhead's parts, in a line.
    QString memoryExplanation(const plan::PlanResult& c) const;
    void fillTable();
    void showModelInfo();

    std::optional<plan::ModelSpec> m_model;
    QString m_modelSource; // preset name or folder
    QString m_modelError;  // why the last model the user picked could not be used
    std::optional<plan::PlanInput> m_input;
    std::vector<plan::PlanResult> m_results;
    int64_t m_largestMicroBatch = 0;
    int64_t m_fewestGpus = 0;
    QTimer* m_debounce = nullptr;

    QComboBox* m_modelBox = nullptr;
    QPushButton* m_openFolder = nullptr;
    QPushButton* m_toLaunch = nullptr;
    QPushButton* m_importConfig = nullptr;
    QPushButton* m_recommendLayout = nullptr; // plan::recommendLayout: sets tp, pp, accumulation
    QToolButton* m_export = nullptr;
    std::optional<plan::DeepSpeedSettings> m_importedDeepSpeed; // its knobs, for DeepSpeed mode
    QString m_importedPath;
    QLabel* m_modelInfo = nullptr;
    QSpinBox* m_gpus = nullptr;
    QSpinBox* m_nodes = nullptr;
    QComboBox* m_device = nullptr;
    QDoubleSpinBox* m_customGiB = nullptr; // a card's memory, a custom GPU's, a CPU node's RAM
    QLabel* m_memoryLabel = nullptr;
    QLabel* m_gpusLabel = nullptr;
    double m_gpuCustomGiB = 48; // "GPU, custom size"
    double m_cpuRamGiB = 0;     // "CPU": RAM per node; 0 = this machine's
    QDoubleSpinBox* m_hostGiB = nullptr;
    QComboBox* m_mode = nullptr;
    QTableWidget* m_table = nullptr;
    QBoxLayout* m_chartRow = nullptr; // chart and table: a row, or a column when narrow
    QScrollArea* m_fields = nullptr;  // the form on the left
    QComboBox* m_strategy = nullptr;
    QSpinBox* m_shardGroup = nullptr;
    ParallelFields* m_parallel = nullptr; // tensor / pipeline / sequence parallel
    QComboBox* m_precision = nullptr;
    QComboBox* m_checkpointing = nullptr;
    QComboBox* m_offload = nullptr;
    QComboBox* m_reduceDtype = nullptr; // bf16-mixed: fp32 or bf16 gradient reduce
    QSpinBox* m_microBatch = nullptr;
    QSpinBox* m_seqLen = nullptr;
    QSpinBox* m_gradAccum = nullptr;
    LoraFields* m_lora = nullptr;
    MessageBar* m_message = nullptr;
    MemoryBarChart* m_chart = nullptr;
    QLabel* m_verdict = nullptr;
    QLabel* m_details = nullptr;
};

QStringList planCategoryNames();
// What each row of the Plan page's table holds (its tooltip): planCategoryNames()'s order, then
// the total and the host rows.
QStringList planCategoryTips();
// The planner's total bytes per rank for a run.json (what the Monitor draws next to the measured
// memory); empty when the spec or its model cannot be planned. Reads a model folder: call it off
// the UI thread.
std::optional<double> predictedBytesPerRank(const nlohmann::json& runSpec);
// Its whole plan (the Monitor compares each memory category with it).
std::optional<plan::PlanResult> planOfRunSpec(const nlohmann::json& runSpec);
std::vector<double> planCategoryBytes(const plan::MemoryBreakdown& m);

} // namespace shard::widgets
