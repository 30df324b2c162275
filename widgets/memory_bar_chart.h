// Stacked bars of memory per device by category (parameters, gradients, optimizer state, ...),
// one bar per strategy or per rank, with the device's capacity as a horizontal line and, where
// given, a predicted total per bar drawn on the same axes.
#pragma once

#include <optional>
#include <vector>

#include <QStringList>
#include <QWidget>

class QCustomPlot;
class QCPBars;
class QCPGraph;
class QCPItemStraightLine;
class QCPTextElement;
class QMouseEvent;

namespace shard::widgets {

struct MemoryBar {
    QString label;
    std::vector<double> bytes;            // one entry per category, in setCategories' order
    std::optional<double> predictedBytes; // e.g. the planner's total, drawn as a marker
    bool highlighted = false;             // the chosen strategy: label drawn bold
    // The allocator's measured peak: the bar reaches it (what the categories do not account
    // for is stacked on top as its own segment) and its label reads measured vs predicted.
    std::optional<double> measuredPeakBytes;
    // The plan's bytes per category (setCategories' order), said beside each measured one in
    // the tooltip; empty: none.
    std::vector<double> plannedBytes;
    // More lines for the hover tooltip (plain text), e.g. a GPU caching allocator's figures.
    QStringList notes;
};

class MemoryBarChart : public QWidget {
    Q_OBJECT
public:
    explicit MemoryBarChart(const QString& title = {}, QWidget* parent = nullptr);

    void setCategories(const QStringList& categories);
    void setBars(const std::vector<MemoryBar>& bars);
    // Device memory; none hides the line (e.g. CPU without a limit).
    void setCapacity(std::optional<double> bytes, const QString& label = {});
    void setPredictionLabel(const QString& label);
    void setTitle(const QString& title);
    // "%1 per rank": %1 becomes GiB or MiB, whichever suits the values.
    void setAxisLabel(const QString& label);

    const std::vector<MemoryBar>& bars() const { return m_bars; }
    QStringList categories() const { return m_categories; }
    std::optional<double> capacity() const { return m_capacity; }
    QCustomPlot* customPlot() const { return m_plot; }
    // What the hover tooltip says for bar `index` (0-based): categories, total, peak, prediction.
    QString describeBar(int index) const;
    QString title() const;
    // The legend's entries in order: the categories some bar holds, then the measured-peak and
    // prediction marks when shown.
    QStringList legendEntries() const;
    // Draws now instead of at the next event-loop turn (screenshots, tests).
    void flushNow();
    void restyle();

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void rebuild();
    void showToolTip(QMouseEvent* event);
    QString titleText() const;
    void fitTitle();
    double tickSpacingPx() const;
    QString barLabel(const MemoryBar& bar, double spacingPx) const;
    QString formatAxisBytes(double bytes) const;

    QCustomPlot* m_plot = nullptr;
    QCPTextElement* m_title = nullptr;
    std::vector<QCPBars*> m_stack;
    QCPBars* m_restOfPeak = nullptr; // measured peak minus the categories, when given
    QString m_titleBase;
    double m_unit = 1.0;
    QCPGraph* m_prediction = nullptr;
    QCPItemStraightLine* m_capacityLine = nullptr;
    QStringList m_categories;
    std::vector<MemoryBar> m_bars;
    std::optional<double> m_capacity;
    QString m_capacityLabel;
    QString m_predictionLabel;
    QString m_axisLabel;
};

} // namespace shard::widgets
