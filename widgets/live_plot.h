// A live line chart over QCustomPlot (STYLE.md, PlotJuggler and QCustomPlot notes): bounded
// per-series buffers, a dirty flag plus one ~40 ms single-shot timer so bursts of data cost at
// most ~25 redraws per second, batched addData(keys, values, sorted), queued replots, no redraw
// while hidden, and min/max decimation to the pixel width once a history is long. Optional
// TensorBoard-style EMA smoothing draws the raw line faint under the smoothed one.
#pragma once

#include <memory>
#include <vector>

#include <QColor>
#include <QString>
#include <QTimer>
#include <QWidget>

#include "widgets/chart_math.h"
#include "widgets/series_buffer.h"

class QCustomPlot;
class QCPGraph;
class QCPTextElement;
class QCPAbstractItem;
class QCPItemText;

namespace shard::jobs {
struct RunSeries;
}

namespace shard::widgets {

enum class XAxisKind { Step, Tokens, WallTime };
QString xAxisLabel(XAxisKind kind);
// The run's column for an x axis.
const QVector<double>& xColumn(const jobs::RunSeries& run, XAxisKind kind);

class LivePlot : public QWidget {
    Q_OBJECT
public:
    explicit LivePlot(const QString& title = {}, QWidget* parent = nullptr);
    ~LivePlot() override;

    static constexpr int kCoalesceMs = 40;
    // Above this many points per pixel column a series is drawn decimated.
    static constexpr int kDecimateAbovePointsPerPixel = 3;

    int addSeries(const QString& name, const QColor& color,
        qsizetype capacity = SeriesBuffer::kDefaultCapacity);
    void removeAllSeries();
    int seriesCount() const { return int(m_series.size()); }
    const SeriesBuffer& series(int index) const;
    // Points currently handed to QCustomPlot for the raw line (after decimation).
    int drawnPointCount(int index) const;

    void appendPoints(int index, const QVector<double>& keys, const QVector<double>& values);
    void setPoints(int index, const QVector<double>& keys, const QVector<double>& values);
    void setSeriesVisible(int index, bool visible);

    void setSmoothing(double weight); // 0 = off, up to 0.999
    double smoothing() const { return m_smoothing; }
    void setLogY(bool on);
    bool logY() const { return m_logY; }
    // Auto-ranged linear y starts at 0 when every value is >= 0 (memory, throughput).
    void setYIncludesZero(bool on);
    void setXAxisKind(XAxisKind kind);
    void setYAxisLabel(const QString& label);
    void setTitle(const QString& title);
    void setLegendVisible(bool visible);
    bool legendVisible() const { return m_legendWanted; }
    // Back to automatic ranges after the user dragged or zoomed.
    void resetView();
    // A dashed vertical line at x = key with a short label at its top (the Monitor marks a
    // restart at its step), kept until clearMarkers().
    void addMarker(double key, const QString& label);
    void clearMarkers();
    int markerCount() const { return int(m_markers.size() / 2); } // a line and a label each
    // Said in the middle of the chart while it has points and none of them holds a value (a
    // command run whose engine does not log this metric): "Not logged by this run".
    void setAbsentText(const QString& text);
    // What the middle of the plot says while it has no point at all (an empty page: where to
    // start); empty: nothing.
    void setEmptyText(const QString& text);
    // The text in the middle now (the absent or the empty text); empty when neither is shown.
    QString absentTextShown() const;

    QCustomPlot* customPlot() const { return m_plot; }
    int replotCount() const { return m_replotCount; }
    bool hasPendingRedraw() const { return m_timer.isActive() || m_deferredWhileHidden; }
    // Rebuilds what is dirty and redraws now (screenshots, exports, benchmarks).
    void flushNow();
    // Re-applies theme colours (after the palette changed).
    void restyle();

Q_SIGNALS:
    void replotted();

protected:
    void showEvent(QShowEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    struct Series;
    void markDirty(Series& s, bool full);
    void markAllDirty(bool full);
    void flush(bool immediate);
    void rebuild(Series& s);
    void applySeriesStyle(Series& s);
    int pixelWidth() const;

    QCustomPlot* m_plot = nullptr;
    QCPTextElement* m_title = nullptr;
    std::vector<std::unique_ptr<Series>> m_series;
    std::vector<QCPAbstractItem*> m_markers; // lines and labels, owned by m_plot
    QString m_absentText;
    QString m_emptyText;
    QCPItemText* m_absentLabel = nullptr; // owned by m_plot; created on first use
    QTimer m_timer;
    double m_smoothing = 0.0;
    bool m_legendWanted = false; // setLegendVisible; drawn only with an entry
    bool m_logY = false;
    bool m_yIncludesZero = false;
    bool m_autoRange = true;
    bool m_deferredWhileHidden = false;
    bool m_inFlush = false;
    int m_replotCount = 0;
};

} // namespace shard::widgets
