// Monitor page: a run followed live from its directory — loss (raw and smoothed), learning rate,
// grad norm, tokens/s, memory per rank stacked by category next to the planner's prediction,
// progress with ETA, the log tail and events, stop, and resume from the latest checkpoint. Every
// run is followed through the run service by its store id; a folder opened here is attached to
// the store first.
#pragma once

#include <functional>
#include <optional>

#include <QWidget>

#include "jobs/format_bytes.h"

#include "jobs/run_series.h"
#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "plan/planner.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QTabWidget;
class QTimer;
class QTreeWidget;

namespace shard::widgets {

class LivePlot;
class MemoryBarChart;
class MessageBar;

class MonitorPage : public QWidget {
    Q_OBJECT
public:
    explicit MonitorPage(QWidget* parent = nullptr);

    // The planner's plan of a run.json (its total per rank is drawn beside each rank's measured
    // memory, its categories compared with the measured ones); empty when it cannot plan it.
    using Predictor = std::function<std::optional<plan::PlanResult>(const nlohmann::json& spec)>;
    void setPredictor(Predictor predictor) { m_predictor = std::move(predictor); }
    // Whether Resume is offered: the run has ended and the run service says it is resumable (a
    // complete checkpoint with steps left); resumeCheckDone() follows each change.
    bool canResume() const;

    // Attaches a run folder on this machine to the store, then follows it by its id.
    void openRunDirectory(const QString& directory);
    // Follows a recorded run through the run service (any target); stop and resume go through
    // its launcher.
    void setStore(jobs::RunService* store);
    void openStoreRun(qint64 runId);
    // The followed run's id in the store (0 while a folder is being attached).
    qint64 storeRunId() const { return m_storeRunId; }
    QString runDirectory() const;
    const jobs::RunSeries& run() const { return m_run; }
    int pointCount() const { return int(m_run.size()); }
    // The Scalars tab: the run's tags (imported runs keep every scalar under its tag), the one
    // shown, and its points.
    QStringList scalarTags() const;
    void showScalar(const QString& tag);
    int scalarPointCount() const;
    QString messageText() const;
    QString logText() const;
    QString etaText() const;
    // The checkpoints' cost: size (in all, per rank), write time, and the training at risk
    // between two (the measured step time x --checkpoint-every); empty before it is known.
    QString checkpointText() const;
    // The store's live runs, offered at the top of the page ("Running now").
    void setRunningRuns(const QVector<jobs::RunRecord>& runs);
    int runningRunCount() const;
    // A GPU run's caching-allocator figures under the memory chart (torchtitan's max_reserved,
    // alloc retries and OOMs over the ranks); empty, and hidden, for a CPU run.
    QString deviceMemoryText() const;
    // The rank whose log the Log tab shows.
    int shownLogRank() const { return m_shownLogRank; }
    bool finished() const { return m_finished; }

    LivePlot* lossPlot() const { return m_loss; }
    LivePlot* lrPlot() const { return m_lr; }
    LivePlot* gradNormPlot() const { return m_gradNorm; }
    LivePlot* throughputPlot() const { return m_throughput; }
    // A preference run's (DPO, ORPO) reward margin and accuracy, as TRL logs them: shown for
    // such runs only (their spec's objective, or the scalars arriving).
    LivePlot* marginPlot() const { return m_margin; }
    LivePlot* accuracyPlot() const { return m_accuracy; }
    MemoryBarChart* memoryChart() const { return m_memory; }
    // The run's sample completions (step, prompt, completion), as sample events arrive.
    QTreeWidget* samplesView() const { return m_samples; }
    // Draws every chart now (screenshots).
    void flushCharts();
    void restyle();

Q_SIGNALS:
    void pointsArrived(int total);
    void runFinished(const QString& reason);
    void resumeCheckDone(bool available);
    void resumeDone(const QString& error);

private:
    void browse();
    void onUpdate(const jobs::FollowUpdate& update);
    void onStoreState(const jobs::FollowUpdate::State& state);
    QString runningLabel() const; // the status while the run is live
    void updateProgress();
    void updateMemory();
    void stopRun();
    void resumeRun();
    void reset();
    void showNoRun(); // the empty page: what to do to see a run

    jobs::RunService* m_store = nullptr;
    qint64 m_storeRunId = 0;
    quint64 m_storeTicket = 0;
    QString m_attaching; // the folder being attached, until it is a run
    static constexpr int kAttachRetryMs = 1000;
    QTimer* m_attachRetry = nullptr; // tries a folder that is not a run (yet) again
    QString m_where;                 // [host:]directory of the followed run
    bool m_storeResumable = false;
    bool m_awaitingResume = false;
    jobs::RunSeries m_run;
    Predictor m_predictor;
    std::optional<double> m_predictedBytes;
    quint64 m_predictionGeneration = 0;
    // The plan's bytes per memory category (protocol::memoryCategories' order; empty: none) and
    // the moment of its peak.
    std::vector<double> m_plannedByCategory;
    QString m_plannedPeakPhase;
    int64_t m_totalSteps = 0;
    bool m_finished = false;
    // The reason in the finish event of the run's latest process (none since its last start).
    std::optional<QString> m_finishReason;
    int m_shownLogRank = 0;

    QLineEdit* m_path = nullptr;
    QPushButton* m_open = nullptr;
    QPushButton* m_stop = nullptr;
    QPushButton* m_resume = nullptr;
    QLabel* m_status = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_eta = nullptr;
    QLabel* m_checkpointCost = nullptr;
    // The last checkpoint written (its "checkpoint" event): every rank's files, rank 0's time.
    struct SavedCheckpoint {
        int64_t step = -1;
        int64_t bytes = 0;
        double seconds = 0.0;
    } m_lastSave;
    void updateCheckpointCost();
    QSlider* m_smoothing = nullptr;
    MessageBar* m_message = nullptr;
    LivePlot* m_loss = nullptr;
    LivePlot* m_lr = nullptr;
    LivePlot* m_gradNorm = nullptr;
    LivePlot* m_throughput = nullptr;
    LivePlot* m_margin = nullptr;
    LivePlot* m_accuracy = nullptr;
    void showPreferenceCharts(bool on);
    MemoryBarChart* m_memory = nullptr;
    QLabel* m_deviceMemory = nullptr;
    QPlainTextEdit* m_log = nullptr;
    QComboBox* m_logRank = nullptr;
    QComboBox* m_running = nullptr;
    QLabel* m_runningLabel = nullptr;
    QLabel* m_logLabel = nullptr;
    QTreeWidget* m_events = nullptr;
    QTreeWidget* m_samples = nullptr;
    QComboBox* m_scalarTag = nullptr;
    LivePlot* m_scalars = nullptr;
    QLabel* m_scalarsNote = nullptr;
    QTabWidget* m_tabs = nullptr;
    void requestScalars();
};

// The memory categories (protocol/memory_categories.h) as the Monitor stacks them.
QStringList memoryCategoryNames();
std::vector<double> memoryByCategory(const protocol::RankMemory& m);
using jobs::formatBytes;    // the one byte formatter (jobs/format_bytes.h)
using jobs::formatDuration; // and its duration formatter

} // namespace shard::widgets
