// MemoryBarChart: QCPBars stacked with moveAbove, GiB on the value axis, a capacity line.
#include "widgets/memory_bar_chart.h"

#include <algorithm>
#include <numeric>

#include <QFontMetrics>
#include <QMouseEvent>
#include <QResizeEvent>
#include <QToolTip>

#include "widgets/qcp.h"

#include "widgets/theme.h"

namespace shard::widgets {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
} // namespace

MemoryBarChart::MemoryBarChart(const QString& title, QWidget* parent)
    : QWidget(parent)
{
    m_plot = new QCustomPlot(this);
    m_plot->setMinimumSize(240, 180);
    m_plot->setFocusPolicy(Qt::NoFocus);
    m_plot->plotLayout()->insertRow(0);
    m_titleBase = title;
    m_title = new QCPTextElement(
        m_plot, title, QFont(font().family(), font().pointSize(), QFont::DemiBold));
    m_plot->plotLayout()->addElement(0, 0, m_title);
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
    m_plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
    // The legend goes in its own row under the bars so it never covers them.
    m_plot->axisRect()->insetLayout()->take(m_plot->legend);
    m_plot->plotLayout()->addElement(2, 0, m_plot->legend);
    m_plot->legend->setWrap(4);
    m_plot->legend->setMargins(QMargins(4, 2, 4, 2));
    m_plot->plotLayout()->setRowStretchFactor(2, 0.001);
    m_plot->plotLayout()->setRowSpacing(2);
    m_axisLabel = tr("%1 per device");
    m_plot->yAxis->setNumberFormat("gb");
    m_plot->xAxis->setTickLength(0, 0);
    m_plot->xAxis->setSubTicks(false);
    m_plot->xAxis->grid()->setVisible(false);

    m_capacityLine = new QCPItemStraightLine(m_plot);
    m_capacityLine->setPen(QPen(QColor(200, 40, 40), 2, Qt::DashLine));
    m_capacityLine->setVisible(false);
    m_predictionLabel = tr("predicted");
    // The capacity is named in the title, never drawn over the bars.
    m_plot->setMouseTracking(true);
    connect(m_plot, &QCustomPlot::mouseMove, this, &MemoryBarChart::showToolTip);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);
    restyle();
}

void MemoryBarChart::setCategories(const QStringList& categories)
{
    if (categories == m_categories)
        return;
    m_categories = categories;
    for (QCPBars* bars : m_stack)
        m_plot->removePlottable(bars);
    m_stack.clear();
    if (m_prediction) {
        m_plot->removePlottable(m_prediction);
        m_prediction = nullptr;
    }
    QCPBars* below = nullptr;
    for (int i = 0; i < categories.size(); ++i) {
        auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        bars->setName(categories[i]);
        bars->setWidth(0.6);
        const QColor c = Theme::categoryColor(i);
        bars->setBrush(c);
        bars->setPen(QPen(c.darker(130), 1));
        if (below)
            bars->moveAbove(below);
        below = bars;
        m_stack.push_back(bars);
    }
    rebuild();
}

void MemoryBarChart::setBars(const std::vector<MemoryBar>& bars)
{
    m_bars = bars;
    rebuild();
}

void MemoryBarChart::setCapacity(std::optional<double> bytes, const QString& label)
{
    m_capacity = bytes;
    m_capacityLabel = label;
    rebuild();
}

void MemoryBarChart::setPredictionLabel(const QString& label)
{
    m_predictionLabel = label;
    rebuild();
}

void MemoryBarChart::setTitle(const QString& title)
{
    m_titleBase = title;
    fitTitle();
}

void MemoryBarChart::fitTitle()
{
    // A title wider than the chart goes on two lines at its " · " (a cut title reads
    // "ory per device · capacity 80.00 GiB (das").
    QString text = titleText();
    if (QFontMetrics(m_title->font()).horizontalAdvance(text) > width() - 8)
        text.replace(QStringLiteral(" · "), QStringLiteral("\n"));
    if (text != m_title->text()) {
        m_title->setText(text);
        m_plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

QString MemoryBarChart::barLabel(const MemoryBar& bar, double spacingPx) const
{
    if (!bar.measuredPeakBytes)
        return bar.label;
    // Measured and predicted under the bar, on one line where it fits between the bars, else
    // one per line (side by side they ran into the next bar's: "peak 29.8 · plan 29.4peak …").
    QStringList parts {tr("peak %1").arg(*bar.measuredPeakBytes / m_unit, 0, 'f', 1)};
    if (bar.predictedBytes)
        parts << tr("plan %1").arg(*bar.predictedBytes / m_unit, 0, 'f', 1);
    const QString oneLine = parts.join(QStringLiteral(" · "));
    const QFontMetrics metrics(m_plot->xAxis->tickLabelFont());
    const bool fits = metrics.horizontalAdvance(oneLine) <= spacingPx - 8;
    return bar.label + "\n" + (fits ? oneLine : parts.join("\n"));
}

QString MemoryBarChart::title() const
{
    return m_title->text();
}

QString MemoryBarChart::titleText() const
{
    if (!m_capacity || *m_capacity <= 0)
        return m_titleBase;
    const QString cap = m_capacityLabel.isEmpty() ? formatAxisBytes(*m_capacity) : m_capacityLabel;
    return tr("%1 · capacity %2 (dashed)").arg(m_titleBase, cap);
}

QString MemoryBarChart::formatAxisBytes(double bytes) const
{
    return bytes >= kGiB ? tr("%1 GiB").arg(bytes / kGiB, 0, 'f', 2)
                         : tr("%1 MiB").arg(bytes / kMiB, 0, 'f', 1);
}

QString MemoryBarChart::describeBar(int index) const
{
    if (index < 0 || index >= int(m_bars.size()))
        return {};
    const MemoryBar& bar = m_bars[size_t(index)];
    QStringList lines {"<b>" + bar.label.toHtmlEscaped() + "</b>"};
    double sum = 0.0;
    const bool planned = bar.plannedBytes.size() == bar.bytes.size();
    for (int c = 0; c < m_categories.size() && size_t(c) < bar.bytes.size(); ++c) {
        sum += bar.bytes[size_t(c)];
        QString line = tr("%1: %2").arg(
            m_categories[c].toHtmlEscaped(), formatAxisBytes(bar.bytes[size_t(c)]));
        if (planned)
            line += tr(" · %1 %2")
                        .arg(m_predictionLabel.toHtmlEscaped(),
                            formatAxisBytes(bar.plannedBytes[size_t(c)]));
        lines << line;
    }
    lines << tr("sum of categories: %1").arg(formatAxisBytes(sum));
    if (bar.measuredPeakBytes)
        lines << tr("<b>measured peak: %1</b>").arg(formatAxisBytes(*bar.measuredPeakBytes));
    if (bar.predictedBytes) {
        QString line = tr("%1: %2").arg(
            m_predictionLabel.toHtmlEscaped(), formatAxisBytes(*bar.predictedBytes));
        if (bar.measuredPeakBytes && *bar.measuredPeakBytes > 0)
            line += tr(" (%1% of measured)")
                        .arg(100.0 * *bar.predictedBytes / *bar.measuredPeakBytes, 0, 'f', 1);
        lines << line;
    }
    if (m_capacity && *m_capacity > 0)
        lines << tr("capacity: %1").arg(formatAxisBytes(*m_capacity));
    for (const QString& note : bar.notes)
        lines << note.toHtmlEscaped();
    return lines.join("<br>");
}

void MemoryBarChart::showToolTip(QMouseEvent* event)
{
    const double x = m_plot->xAxis->pixelToCoord(event->pos().x());
    const int index = int(std::lround(x)) - 1;
    if (index < 0 || index >= int(m_bars.size()) || std::abs(x - (index + 1)) > 0.4) {
        QToolTip::hideText();
        return;
    }
    QToolTip::showText(event->globalPosition().toPoint(), describeBar(index), m_plot);
}

void MemoryBarChart::setAxisLabel(const QString& label)
{
    m_axisLabel = label;
    rebuild();
}

double MemoryBarChart::tickSpacingPx() const
{
    // The value axis and its label take about 70 px; the bars span size + 0.2 slots.
    return std::max(1.0, (width() - 70.0) / (double(m_bars.size()) + 0.2));
}

void MemoryBarChart::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    if (event->oldSize().width() != width() && !m_bars.empty())
        rebuild(); // the labels under the bars and the title fit the new width
    else
        fitTitle();
    // As many legend columns as fit, so no entry is clipped in a narrow column.
    const int columns = std::clamp(width() / 140, 1, 4);
    if (m_plot->legend->wrap() != columns) {
        m_plot->legend->setWrap(columns);
        m_plot->legend->setFillOrder(QCPLegend::foColumnsFirst, true); // re-flow the entries
        m_plot->replot(QCustomPlot::rpQueuedReplot);
    }
}

void MemoryBarChart::restyle()
{
    Theme::stylePlot(m_plot);
    // The theme's palette, not the widget's: it propagates to widgets only later.
    const QColor fg = Theme::palette(Theme::current()).color(QPalette::WindowText);
    m_title->setTextColor(fg);
    if (m_prediction)
        m_prediction->setScatterStyle(
            QCPScatterStyle(QCPScatterStyle::ssCrossSquare, QPen(fg, 2), QBrush(Qt::NoBrush), 11));
    m_plot->xAxis->grid()->setVisible(false);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void MemoryBarChart::rebuild()
{
    // GiB for real models, MiB for the tiny ones (a 20 MiB bar should not read 0.02).
    double maxBytes = m_capacity.value_or(0.0);
    bool anyPeak = false;
    for (const MemoryBar& bar : m_bars) {
        maxBytes = std::max(maxBytes, std::accumulate(bar.bytes.begin(), bar.bytes.end(), 0.0));
        maxBytes = std::max(maxBytes, bar.predictedBytes.value_or(0.0));
        maxBytes = std::max(maxBytes, bar.measuredPeakBytes.value_or(0.0));
        anyPeak = anyPeak || bar.measuredPeakBytes.has_value();
    }
    const bool mib = maxBytes < kGiB;
    const double unit = mib ? kMiB : kGiB;
    m_unit = unit;
    if (anyPeak && !m_restOfPeak && !m_stack.empty()) {
        m_restOfPeak = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        m_restOfPeak->setName(tr("rest of peak"));
        m_restOfPeak->setWidth(0.6);
        m_restOfPeak->setBrush(QBrush(QColor(150, 150, 150, 160), Qt::BDiagPattern));
        m_restOfPeak->setPen(QPen(QColor(120, 120, 120), 1));
        m_restOfPeak->moveAbove(m_stack.back());
    }
    m_plot->yAxis->setLabel(mib ? m_axisLabel.arg("MiB") : m_axisLabel.arg("GiB"));
    QVector<double> ticks;
    QVector<QString> labels;
    double top = 0.0;
    bool anyPrediction = false;
    QVector<double> rest;
    for (int b = 0; b < int(m_bars.size()); ++b) {
        const MemoryBar& bar = m_bars[size_t(b)];
        ticks.append(b + 1);
        const auto& bytes = bar.bytes;
        const double sum = std::accumulate(bytes.begin(), bytes.end(), 0.0);
        top = std::max(top, sum / unit);
        rest.append(std::max(0.0, bar.measuredPeakBytes.value_or(sum) - sum) / unit);
        if (bar.measuredPeakBytes)
            top = std::max(top, *bar.measuredPeakBytes / unit);
        labels.append(barLabel(bar, tickSpacingPx()));
        if (m_bars[size_t(b)].predictedBytes) {
            anyPrediction = true;
            top = std::max(top, *m_bars[size_t(b)].predictedBytes / unit);
        }
    }
    for (int c = 0; c < int(m_stack.size()); ++c) {
        QVector<double> values;
        for (const MemoryBar& bar : m_bars)
            values.append(size_t(c) < bar.bytes.size() ? bar.bytes[size_t(c)] / unit : 0.0);
        m_stack[size_t(c)]->setData(ticks, values, true);
    }
    if (m_restOfPeak) {
        m_restOfPeak->setData(ticks, rest, true);
        m_restOfPeak->setVisible(anyPeak);
    }
    if (anyPrediction && !m_prediction) {
        m_prediction = new QCPGraph(m_plot->xAxis, m_plot->yAxis);
        m_prediction->setLineStyle(QCPGraph::lsNone);
        const QColor fg = Theme::palette(Theme::current()).color(QPalette::WindowText);
        m_prediction->setScatterStyle(
            QCPScatterStyle(QCPScatterStyle::ssCrossSquare, QPen(fg, 2), QBrush(Qt::NoBrush), 11));
    }
    if (m_prediction) {
        m_prediction->setName(m_predictionLabel);
        QVector<double> px, py;
        for (int b = 0; b < int(m_bars.size()); ++b) {
            if (m_bars[size_t(b)].predictedBytes) {
                px.append(b + 1);
                py.append(*m_bars[size_t(b)].predictedBytes / unit);
            }
        }
        m_prediction->setData(px, py, true);
        m_prediction->setVisible(!px.isEmpty());
    }
    // The legend names only the categories some bar holds (LoRA's with a LoRA plan, full
    // fine-tuning's with a full one), in stack order, then the peak and prediction marks.
    for (QCPBars* bars : m_stack)
        bars->removeFromLegend();
    for (QCPAbstractPlottable* mark : {static_cast<QCPAbstractPlottable*>(m_restOfPeak),
             static_cast<QCPAbstractPlottable*>(m_prediction)})
        if (mark)
            mark->removeFromLegend();
    for (int c = 0; c < int(m_stack.size()); ++c) {
        const bool used = std::any_of(m_bars.begin(), m_bars.end(), [c](const MemoryBar& bar) {
            return size_t(c) < bar.bytes.size() && bar.bytes[size_t(c)] > 0;
        });
        if (used) // no bar (no run open, nothing planned): no legend either
            m_stack[size_t(c)]->addToLegend();
    }
    if (m_restOfPeak && anyPeak)
        m_restOfPeak->addToLegend();
    if (m_prediction && m_prediction->visible())
        m_prediction->addToLegend();
    // No entry (no bar): no legend row either (an empty legend would also cap the column's
    // width at its own, squeezing the axes).
    const bool entries = m_plot->legend->itemCount() > 0;
    QCPLayoutGrid* layout = m_plot->plotLayout();
    const bool placed = layout->hasElement(2, 0) && layout->element(2, 0) == m_plot->legend;
    if (entries && !placed) {
        layout->addElement(2, 0, m_plot->legend);
        layout->setRowStretchFactor(2, 0.001); // as tall as its entries, the rest to the bars
    } else if (!entries && placed) {
        layout->take(m_plot->legend);
        layout->simplify();
    }
    m_plot->legend->setVisible(entries);
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int b = 0; b < int(m_bars.size()); ++b) {
        // Qt's rich text is not available in tick labels: mark the chosen bar with brackets.
        const QString& label = labels[b];
        ticker->addTick(ticks[b], m_bars[size_t(b)].highlighted ? "[" + label + "]" : label);
    }
    m_plot->xAxis->setTicker(ticker);
    m_plot->xAxis->setRange(0.4, double(m_bars.size()) + 0.6);

    if (m_capacity && *m_capacity > 0) {
        const double cap = *m_capacity / unit;
        top = std::max(top, cap);
        m_capacityLine->point1->setCoords(0, cap);
        m_capacityLine->point2->setCoords(1, cap);
        m_capacityLine->setVisible(true);
    } else {
        m_capacityLine->setVisible(false);
    }
    fitTitle();
    m_plot->yAxis->setRange(0, top > 0 ? top * 1.12 : 1.0);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

QStringList MemoryBarChart::legendEntries() const
{
    QStringList names;
    for (int i = 0; i < m_plot->legend->itemCount(); ++i)
        if (auto* item = qobject_cast<QCPPlottableLegendItem*>(m_plot->legend->item(i)))
            names << item->plottable()->name();
    return names;
}

void MemoryBarChart::flushNow()
{
    m_plot->replot(QCustomPlot::rpImmediateRefresh);
}

} // namespace shard::widgets
