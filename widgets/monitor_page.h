// Monitor page: a run followed live from its directory — loss (raw and smoothed), learning rate,
// grad norm, tokens/s, memory per rank stacked by category next to the planner's prediction,
// progress with ETA, the log tail and events, stop, and resume from the latest checkpoint. A run is
// followed in its folder, or through the run store (remote runs: SSH, Slurm).
#pragma once

#include <functional>
#include <optional>

#include <QWidget>

#include "jobs/format_bytes.h"

#include "jobs/run_store.h"
#include "widgets/run_dir_follower.h"
#include "widgets/run_series.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QTreeWidget;

namespace shard::widgets {

class LivePlot;
class MemoryBarChart;
class MessageBar;
class StoreService;

class MonitorPage : public QWidget {
    Q_OBJECT
public:
    explicit MonitorPage(QWidget* parent = nullptr);

    // Predicts bytes per rank for a run.json (the planner); empty when it cannot.
    using Predictor = std::function<std::optional<double>(const nlohmann::json& spec)>;
    void setPredictor(Predictor predictor) { m_predictor = std::move(predictor); }
    // Stops the run in `directory`; returns an error message or empty on success.
    using Stopper = std::function<QString(const QString& directory)>;
    void setStopper(Stopper stopper) { m_stopper = std::move(stopper); }
    // Starts the run in `directory` again from its latest complete checkpoint; returns an error
    // message or empty on success. Called off the UI thread.
    using Resumer = std::function<QString(const QString& directory)>;
    void setResumer(Resumer resumer) { m_resumer = std::move(resumer); }
    // Whether Resume is offered: the run has finished and its directory holds a complete
    // checkpoint (checked off the UI thread; resumeCheckDone() follows each check).
    bool canResume() const;

    void openRunDirectory(const QString& directory);
    // Follows a recorded run through the run store (any target: a remote run over SSH or Slurm,
    // or a local one); stop and resume then go through the store's launchers.
    void setStore(StoreService* store);
    void openStoreRun(qint64 runId);
    // The followed run's id in the store (0: a folder followed directly).
    qint64 storeRunId() const { return m_storeRunId; }
    QString runDirectory() const;
    const RunSeries& run() const { return m_run; }
    int pointCount() const { return int(m_run.size()); }
    QString messageText() const;
    QString logText() const;
    QString etaText() const;
    // The store's live runs, offered at the top of the page ("Running now").
    void setRunningRuns(const QVector<jobs::RunRecord>& runs);
    int runningRunCount() const;
    // The rank whose log the Log tab shows.
    int shownLogRank() const { return m_shownLogRank; }
    bool finished() const { return m_finished; }

    LivePlot* lossPlot() const { return m_loss; }
    LivePlot* lrPlot() const { return m_lr; }
    LivePlot* gradNormPlot() const { return m_gradNorm; }
    LivePlot* throughputPlot() const { return m_throughput; }
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
    void onUpdate(const FollowUpdate& update);
    void onStoreState(const FollowUpdate::StoreState& state);
    void onFailed(const QString& message);
    void endWithoutFinish(const QString& why);
    QString runningLabel() const; // the status while the run is live
    void updateProgress();
    void updateMemory();
    void stopRun();
    void resumeRun();
    void refreshResume();
    void reset();

    RunDirFollower m_follower;
    StoreService* m_store = nullptr;
    qint64 m_storeRunId = 0;
    quint64 m_storeTicket = 0;
    QString m_storeWhere;
    bool m_storeResumable = false;
    bool m_awaitingResume = false;
    RunSeries m_run;
    Predictor m_predictor;
    Stopper m_stopper;
    Resumer m_resumer;
    quint64 m_resumeGeneration = 0;
    std::optional<double> m_predictedBytes;
    quint64 m_predictionGeneration = 0;
    int64_t m_totalSteps = 0;
    bool m_finished = false;
    bool m_completed = false; // the store says it finished all its steps: nothing to resume
    int m_shownLogRank = 0;
    int m_startsSeen = 0;       // start events read since the folder was opened
    int m_startsBeforeLive = 0; // after a resume: the start events that mean it is live again
    // A resume asked for in this folder, and the start events it had then: the folder may be
    // opened again (by the resume's own callback and by the launch it queued, in either order)
    // before the resumed run's start event is written.
    QString m_resumedDir;
    int m_resumedStarts = 0;

    QLineEdit* m_path = nullptr;
    QPushButton* m_open = nullptr;
    QPushButton* m_stop = nullptr;
    QPushButton* m_resume = nullptr;
    QLabel* m_status = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_eta = nullptr;
    QSlider* m_smoothing = nullptr;
    MessageBar* m_message = nullptr;
    LivePlot* m_loss = nullptr;
    LivePlot* m_lr = nullptr;
    LivePlot* m_gradNorm = nullptr;
    LivePlot* m_throughput = nullptr;
    MemoryBarChart* m_memory = nullptr;
    QPlainTextEdit* m_log = nullptr;
    QComboBox* m_logRank = nullptr;
    QComboBox* m_running = nullptr;
    QLabel* m_runningLabel = nullptr;
    QLabel* m_logLabel = nullptr;
    QTreeWidget* m_events = nullptr;
    QTreeWidget* m_samples = nullptr;
};

QStringList memoryCategoryNames();
std::vector<double> memoryByCategory(const protocol::RankMemory& m);
QString formatDuration(double seconds);
// Whether Resume has work: a complete checkpoint before the run spec's last step. Reads files.
bool hasStepsLeftToResume(const std::string& runDir);
using jobs::formatBytes; // the one byte formatter (jobs/format_bytes.h)

} // namespace shard::widgets
