// Compare page: overlays the loss and peak-memory curves of any runs, with TensorBoard's EMA
// smoothing, x axis by step / tokens / wall time, log scale, a table of the config values that
// differ, and PNG / CSV export.
#pragma once

#include <functional>
#include <vector>

#include <QWidget>

#include "jobs/run_series.h"
#include "widgets/live_plot.h"

class QCheckBox;
class QComboBox;
class QListWidget;
class QPushButton;
class QSlider;
class QTableWidget;
class QLabel;

namespace shard::widgets {

class LivePlot;
class MessageBar;

class ComparePage : public QWidget {
    Q_OBJECT
public:
    explicit ComparePage(QWidget* parent = nullptr);

    // Adds a loaded run (UI thread). Runs with the same id replace the earlier one.
    void addRun(jobs::RunSeries run);
    // Loads a run folder in the background; emits runAdded or shows the error.
    void addRunDirectory(const QString& directory);
    void removeAllRuns();
    int runCount() const { return int(m_runs.size()); }
    const jobs::RunSeries& runAt(int i) const { return m_runs.at(size_t(i)); }
    void setRunChecked(int index, bool checked);

    void setSmoothing(double weight);
    void setXAxis(XAxisKind kind);
    void setLogY(bool on);

    // Writes every chart (loss, peak memory, throughput) into one PNG at its size on screen or
    // larger, and the memory and throughput charts alone, each with its legend, as
    // NAME-memory.png and NAME-throughput.png; returns an error message or empty.
    QString exportPng(const QString& path);
    // The files exportPng writes for `path`: itself, NAME-memory.png, NAME-throughput.png.
    static QStringList pngFilesFor(const QString& path);
    // One row per (run, record) with every metric recorded: run, step, tokens, wall_time, loss,
    // eval_loss, lr, grad_norm, tokens_per_sec, step_time, comm_bytes, peak_bytes.
    QString exportCsv(const QString& path);

    LivePlot* lossPlot() const { return m_loss; }
    LivePlot* memoryPlot() const { return m_memoryPlot; }
    LivePlot* throughputPlot() const { return m_throughput; }
    // Further scalars (a preference run's rewards, an imported run's tags): the union of the
    // runs' tags to pick from, and the plot of the one picked, a series per run.
    LivePlot* scalarPlot() const { return m_scalarPlot; }
    QStringList scalarTags() const;
    void setScalarTag(const QString& tag);
    QTableWidget* differencesTable() const { return m_diff; }
    // The checked runs' sample completions: a row per prompt, a column per run.
    QTableWidget* samplesTable() const { return m_samples; }
    QString messageText() const;
    void flushCharts();
    void restyle();

Q_SIGNALS:
    void runAdded(const QString& id);
    void loadFailed(const QString& message);

private:
    void rebuildPlots();
    void rebuildDifferences();
    void rebuildSamples();
    void rebuildScalars();
    void browse();

    std::vector<jobs::RunSeries> m_runs;
    std::vector<bool> m_checked;
    XAxisKind m_xAxis = XAxisKind::Step;
    int m_loading = 0;

    QListWidget* m_runList = nullptr;
    QPushButton* m_add = nullptr;
    QPushButton* m_clear = nullptr;
    QSlider* m_smoothing = nullptr;
    QLabel* m_smoothingValue = nullptr;
    QComboBox* m_xAxisBox = nullptr;
    QCheckBox* m_log = nullptr;
    QPushButton* m_png = nullptr;
    QPushButton* m_csv = nullptr;
    MessageBar* m_message = nullptr;
    QLabel* m_emptyHint = nullptr; // where to start, while no run is added
    LivePlot* m_loss = nullptr;
    LivePlot* m_memoryPlot = nullptr;
    LivePlot* m_throughput = nullptr;
    QTableWidget* m_diff = nullptr;
    QTableWidget* m_samples = nullptr;
    QComboBox* m_scalarTag = nullptr;
    LivePlot* m_scalarPlot = nullptr;
    QLabel* m_scalarsNote = nullptr;
};

} // namespace shard::widgets
