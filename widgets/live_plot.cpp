// LivePlot: coalesced, decimated, smoothed live line charts on QCustomPlot.
#include "widgets/live_plot.h"

#include "jobs/run_series.h"

#include <algorithm>
#include <limits>

#include "widgets/qcp.h"

#include "widgets/theme.h"

namespace shard::widgets {

namespace {

// Log-axis ticks at 1-2-5 steps (chart_math's logTicks125), labelled as plain numbers.
class LogTicker125 : public QCPAxisTicker {
protected:
    QVector<double> createTickVector(double, const QCPRange& range) override
    {
        return logTicks125(range.lower, range.upper);
    }
    QVector<double> createSubTickVector(int, const QVector<double>&) override { return {}; }
};

// Steps are counted: ticks on whole steps only (chart_math's integerTickStep).
class StepTicker : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange& range) override
    {
        return integerTickStep(QCPAxisTicker::getTickStep(range));
    }
};

} // namespace

const QVector<double>& xColumn(const jobs::RunSeries& run, XAxisKind kind)
{
    switch (kind) {
    case XAxisKind::Tokens:
        return run.tokens;
    case XAxisKind::WallTime:
        return run.wallTimeSec;
    case XAxisKind::Step:
        break;
    }
    return run.step;
}

QString xAxisLabel(XAxisKind kind)
{
    switch (kind) {
    case XAxisKind::Step:
        return QObject::tr("step");
    case XAxisKind::Tokens:
        return QObject::tr("tokens");
    case XAxisKind::WallTime:
        return QObject::tr("wall time");
    }
    return {};
}

struct LivePlot::Series {
    QString name;
    QColor color;
    SeriesBuffer raw;
    SeriesBuffer smooth;
    EmaState ema;
    QCPGraph* rawGraph = nullptr;
    QCPGraph* smoothGraph = nullptr;
    bool visible = true;
    bool dirty = true;
    bool needsFull = true;
    bool decimated = false;
    qsizetype drawn = 0;
    int64_t droppedAtDraw = 0;
    explicit Series(qsizetype capacity)
        : raw(capacity)
        , smooth(capacity)
    {
    }
};

LivePlot::LivePlot(const QString& title, QWidget* parent)
    : QWidget(parent)
{
    m_plot = new QCustomPlot(this);
    m_plot->setNoAntialiasingOnDrag(true);
    // Long noisy polylines stroked as one path are the raster engine's slow case (seconds for
    // 20 curves); segments and cosmetic pens keep a replot within a frame.
    m_plot->setPlottingHints(QCP::phCacheLabels);
    m_plot->setNotAntialiasedElements(QCP::aeAll);
    m_plot->setAntialiasedElements(QCP::aePlottables);
    m_plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    m_plot->setFocusPolicy(Qt::ClickFocus);
    m_plot->setMinimumSize(200, 140);
    m_plot->plotLayout()->insertRow(0);
    m_title = new QCPTextElement(
        m_plot, title, QFont(font().family(), font().pointSize(), QFont::DemiBold));
    m_plot->plotLayout()->addElement(0, 0, m_title);
    m_plot->legend->setVisible(false);
    m_plot->legend->setFont(QFont(font().family(), std::max(7, font().pointSize() - 1)));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    m_plot->yAxis->setNumberFormat("gb");
    m_plot->xAxis->setNumberFormat("gb");
    setXAxisKind(XAxisKind::Step);

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_plot);

    m_timer.setSingleShot(true);
    m_timer.setInterval(kCoalesceMs);
    connect(&m_timer, &QTimer::timeout, this, [this] { flush(false); });
    connect(m_plot, &QCustomPlot::afterReplot, this, [this] {
        ++m_replotCount;
        Q_EMIT replotted();
    });
    // A drag or a wheel turn means the user wants this view: stop auto-ranging.
    connect(m_plot, &QCustomPlot::mousePress, this, [this] { m_autoRange = false; });
    connect(m_plot, &QCustomPlot::mouseWheel, this, [this] { m_autoRange = false; });
    connect(m_plot, &QCustomPlot::mouseDoubleClick, this, [this] { resetView(); });
    connect(m_plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
        if (m_inFlush)
            return;
        for (auto& s : m_series)
            if (s->decimated)
                markDirty(*s, true);
    });
    restyle();
}

LivePlot::~LivePlot() = default;

int LivePlot::addSeries(const QString& name, const QColor& color, qsizetype capacity)
{
    auto s = std::make_unique<Series>(capacity);
    s->name = name;
    s->color = color;
    s->rawGraph = m_plot->addGraph();
    s->smoothGraph = m_plot->addGraph();
    s->rawGraph->setName(name);
    s->smoothGraph->setName(name);
    s->rawGraph->setAdaptiveSampling(true);
    s->smoothGraph->setAdaptiveSampling(true);
    m_series.push_back(std::move(s));
    applySeriesStyle(*m_series.back());
    markDirty(*m_series.back(), true);
    return int(m_series.size()) - 1;
}

void LivePlot::removeAllSeries()
{
    m_plot->clearGraphs();
    m_series.clear();
    m_autoRange = true;
    m_timer.start();
}

void LivePlot::addMarker(double key, const QString& label)
{
    auto* line = new QCPItemStraightLine(m_plot);
    line->point1->setCoords(key, 0);
    line->point2->setCoords(key, 1);
    line->setPen(QPen(QColor(200, 110, 20), 1, Qt::DashLine));
    auto* text = new QCPItemText(m_plot);
    text->position->setTypeX(QCPItemPosition::ptPlotCoords);
    text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    text->position->setCoords(key, 0.02);
    text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    text->setText(label);
    text->setColor(QColor(200, 110, 20));
    m_markers.push_back(line);
    m_markers.push_back(text);
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

void LivePlot::setAbsentText(const QString& text)
{
    m_absentText = text;
    markAllDirty(false);
}

void LivePlot::setEmptyText(const QString& text)
{
    m_emptyText = text;
    markAllDirty(false);
}

QString LivePlot::absentTextShown() const
{
    return m_absentLabel && m_absentLabel->visible() ? m_absentLabel->text() : QString();
}

void LivePlot::clearMarkers()
{
    for (QCPAbstractItem* item : m_markers)
        m_plot->removeItem(item);
    m_markers.clear();
    m_plot->replot(QCustomPlot::rpQueuedReplot);
}

const SeriesBuffer& LivePlot::series(int index) const
{
    return m_series.at(size_t(index))->raw;
}

int LivePlot::drawnPointCount(int index) const
{
    return m_series.at(size_t(index))->rawGraph->dataCount();
}

void LivePlot::appendPoints(int index, const QVector<double>& keys, const QVector<double>& values)
{
    if (index < 0 || size_t(index) >= m_series.size() || keys.isEmpty())
        return;
    Series& s = *m_series[size_t(index)];
    // Keep only keys that do not go backwards, then feed raw and smoothed buffers the same
    // points so both trim in step.
    QVector<double> k, v, smoothed;
    const qsizetype n = std::min(keys.size(), values.size());
    k.reserve(n);
    v.reserve(n);
    smoothed.reserve(n);
    double lastKey = s.raw.empty() ? -std::numeric_limits<double>::infinity() : s.raw.keys().back();
    for (qsizetype i = 0; i < n; ++i) {
        if (keys[i] < lastKey)
            continue;
        lastKey = keys[i];
        k.append(keys[i]);
        v.append(values[i]);
        smoothed.append(emaStep(s.ema, values[i], m_smoothing));
    }
    s.raw.append(k, v);
    s.smooth.append(k, smoothed);
    markDirty(s, false);
}

void LivePlot::setPoints(int index, const QVector<double>& keys, const QVector<double>& values)
{
    if (index < 0 || size_t(index) >= m_series.size())
        return;
    Series& s = *m_series[size_t(index)];
    s.raw.clear();
    s.smooth.clear();
    s.ema = {};
    s.raw.append(keys, values);
    s.smooth.append(s.raw.keys(), emaSmooth(s.raw.values(), m_smoothing));
    s.ema = {};
    for (double v : s.raw.values())
        emaStep(s.ema, v, m_smoothing);
    markDirty(s, true);
}

void LivePlot::setSeriesVisible(int index, bool visible)
{
    if (index < 0 || size_t(index) >= m_series.size())
        return;
    Series& s = *m_series[size_t(index)];
    s.visible = visible;
    applySeriesStyle(s);
    markDirty(s, false);
}

void LivePlot::setSmoothing(double weight)
{
    weight = std::clamp(weight, 0.0, 0.999);
    if (weight == m_smoothing)
        return;
    m_smoothing = weight;
    for (auto& s : m_series) {
        s->smooth.clear();
        s->smooth.append(s->raw.keys(), emaSmooth(s->raw.values(), weight));
        s->ema = {};
        for (double v : s->raw.values())
            emaStep(s->ema, v, weight);
        applySeriesStyle(*s);
        markDirty(*s, true);
    }
}

void LivePlot::setLogY(bool on)
{
    m_logY = on;
    if (on) {
        m_plot->yAxis->setScaleType(QCPAxis::stLogarithmic);
        // 1-2-5 ticks in plain numbers: a loss between 0.3 and 8 gets 0.5, 1, 2, 5 (not one
        // crowded 7·10⁰ label and nothing below 1).
        m_plot->yAxis->setTicker(QSharedPointer<LogTicker125>::create());
        m_plot->yAxis->setNumberFormat("g");
        m_plot->yAxis->setNumberPrecision(3);
    } else {
        m_plot->yAxis->setScaleType(QCPAxis::stLinear);
        m_plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        m_plot->yAxis->setNumberFormat("gb");
        m_plot->yAxis->setNumberPrecision(6);
    }
    m_autoRange = true;
    markAllDirty(false);
}

void LivePlot::setXAxisKind(XAxisKind kind)
{
    m_plot->xAxis->setLabel(xAxisLabel(kind) + (kind == XAxisKind::WallTime ? " (h:mm:ss)" : ""));
    if (kind == XAxisKind::WallTime) {
        auto ticker = QSharedPointer<QCPAxisTickerTime>::create();
        ticker->setTimeFormat("%h:%m:%s");
        m_plot->xAxis->setTicker(ticker);
    } else {
        m_plot->xAxis->setTicker(kind == XAxisKind::Step
                ? QSharedPointer<QCPAxisTicker>(QSharedPointer<StepTicker>::create())
                : QSharedPointer<QCPAxisTicker>::create());
        m_plot->xAxis->setNumberFormat("gb");
        m_plot->xAxis->setNumberPrecision(kind == XAxisKind::Tokens ? 3 : 6);
    }
    m_autoRange = true;
    markAllDirty(false);
}

void LivePlot::setYIncludesZero(bool on)
{
    m_yIncludesZero = on;
    markAllDirty(false);
}

void LivePlot::setYAxisLabel(const QString& label)
{
    m_plot->yAxis->setLabel(label);
}

void LivePlot::setTitle(const QString& title)
{
    m_title->setText(title);
}

void LivePlot::setLegendVisible(bool visible)
{
    m_legendWanted = visible;
    for (auto& s : m_series)
        applySeriesStyle(*s);
    markAllDirty(false);
}

void LivePlot::resetView()
{
    m_autoRange = true;
    markAllDirty(true);
}

void LivePlot::restyle()
{
    Theme::stylePlot(m_plot);
    // The theme's palette, not the widget's: it propagates to widgets only later.
    m_title->setTextColor(Theme::palette(Theme::current()).color(QPalette::WindowText));
    markAllDirty(false);
}

void LivePlot::applySeriesStyle(Series& s)
{
    const bool smoothing = m_smoothing > 0.0;
    QColor faint = s.color;
    faint.setAlpha(70);
    QPen rawPen(smoothing ? faint : s.color, 0); // width 0: cosmetic, the fast path
    QPen smoothPen(s.color, 0);
    rawPen.setCosmetic(true);
    smoothPen.setCosmetic(true);
    s.rawGraph->setPen(rawPen);
    s.smoothGraph->setPen(smoothPen);
    s.rawGraph->setVisible(s.visible);
    s.smoothGraph->setVisible(s.visible && smoothing);
    // One legend entry per series with points: the line the eye follows (no "eval loss" for a
    // run without evaluations).
    s.rawGraph->removeFromLegend();
    s.smoothGraph->removeFromLegend();
    if (s.visible && m_legendWanted && !s.raw.empty())
        (smoothing ? s.smoothGraph : s.rawGraph)->addToLegend();
    // An empty legend is not drawn (an empty box on a chart without points).
    m_plot->legend->setVisible(m_legendWanted && m_plot->legend->itemCount() > 0);
}

void LivePlot::markDirty(Series& s, bool full)
{
    s.dirty = true;
    s.needsFull = s.needsFull || full;
    if (!m_timer.isActive())
        m_timer.start();
}

void LivePlot::markAllDirty(bool full)
{
    for (auto& s : m_series) {
        s->dirty = true;
        s->needsFull = s->needsFull || full;
    }
    if (!m_timer.isActive())
        m_timer.start();
}

int LivePlot::pixelWidth() const
{
    const int w = m_plot->axisRect()->width();
    return std::max(w > 0 ? w : m_plot->width() - 80, 100);
}

void LivePlot::rebuild(Series& s)
{
    const qsizetype n = s.raw.size();
    if ((n > 0) != (s.drawn > 0))
        applySeriesStyle(s); // its legend entry comes with its first point, goes with its last
    const int px = pixelWidth();
    const bool decimate = n > qsizetype(kDecimateAbovePointsPerPixel) * px;
    const bool smoothing = m_smoothing > 0.0;
    const bool prefixIntact = s.droppedAtDraw == s.raw.droppedCount() && s.drawn <= n;
    if (!decimate && !s.decimated && !s.needsFull && prefixIntact) {
        if (n > s.drawn) {
            // Only the new tail, in one batch, already sorted.
            s.rawGraph->addData(s.raw.keys().mid(s.drawn), s.raw.values().mid(s.drawn), true);
            if (smoothing)
                s.smoothGraph->addData(
                    s.smooth.keys().mid(s.drawn), s.smooth.values().mid(s.drawn), true);
        }
    } else if (!decimate) {
        s.rawGraph->setData(s.raw.keys(), s.raw.values(), true);
        if (smoothing)
            s.smoothGraph->setData(s.smooth.keys(), s.smooth.values(), true);
        else
            s.smoothGraph->data()->clear();
    } else {
        double lo = s.raw.keys().front();
        double hi = s.raw.keys().back();
        if (!m_autoRange) {
            lo = m_plot->xAxis->range().lower;
            hi = m_plot->xAxis->range().upper;
        }
        if (!(hi > lo))
            hi = lo + 1.0;
        auto d = decimateMinMax(s.raw.keys(), s.raw.values(), lo, hi, px);
        s.rawGraph->setData(d.keys, d.values, true);
        if (smoothing) {
            auto ds = decimateMinMax(s.smooth.keys(), s.smooth.values(), lo, hi, px);
            s.smoothGraph->setData(ds.keys, ds.values, true);
        } else {
            s.smoothGraph->data()->clear();
        }
    }
    if (!smoothing && !s.smoothGraph->data()->isEmpty())
        s.smoothGraph->data()->clear();
    // A line needs two points: a lone one is drawn as a dot.
    const bool lone = n == 1;
    if (lone != (s.rawGraph->scatterStyle().shape() != QCPScatterStyle::ssNone))
        s.rawGraph->setScatterStyle(lone ? QCPScatterStyle(QCPScatterStyle::ssDisc, 6)
                                         : QCPScatterStyle(QCPScatterStyle::ssNone));
    s.decimated = decimate;
    s.drawn = n;
    s.droppedAtDraw = s.raw.droppedCount();
    s.dirty = false;
    s.needsFull = false;
}

void LivePlot::flush(bool immediate)
{
    if (!immediate && !isVisible()) {
        // Hidden plots do not draw; showEvent picks the work up.
        m_deferredWhileHidden = true;
        return;
    }
    m_deferredWhileHidden = false;
    m_inFlush = true;
    for (auto& s : m_series)
        if (s->dirty)
            rebuild(*s);
    if (m_autoRange) {
        bool haveData = false;
        for (auto& s : m_series)
            haveData = haveData || (s->visible && !s->raw.empty());
        if (haveData) {
            m_plot->rescaleAxes(true);
            // A single point: an x range around it, not an empty one.
            const QCPRange x = m_plot->xAxis->range();
            if (!(x.size() > 0))
                m_plot->xAxis->setRange(x.lower - 1.0, x.upper + 1.0);
            // A little headroom so a flat line does not sit on the frame. On a linear axis from
            // the data's own span: QCustomPlot widens a flat series to the previous range's size
            // around it (a constant learning rate of 3e-4 drew as a line at "0" in -0.5..0.5).
            QCPRange y = m_plot->yAxis->range();
            bool spanned = false;
            for (int i = 0; !m_logY && i < m_plot->graphCount(); ++i) {
                bool found = false;
                const QCPRange r = m_plot->graph(i)->visible()
                    ? m_plot->graph(i)->getValueRange(found)
                    : QCPRange();
                if (found && spanned)
                    y.expand(r);
                else if (found)
                    y = r;
                spanned = spanned || found;
            }
            if (m_logY) {
                m_plot->yAxis->setRange(y.lower / 1.15, y.upper * 1.15);
            } else if (m_yIncludesZero && y.lower >= 0) {
                m_plot->yAxis->setRange(0, y.upper > 0 ? y.upper * 1.05 : 1.0);
            } else {
                // Flat, or only rounding noise apart (an EMA of a constant): 5% of the value.
                const double mid = y.center();
                const bool flat = y.size() <= std::abs(mid) * 1e-9;
                const double pad = flat ? std::max(std::abs(mid) * 0.05, 1e-9) : y.size() * 0.05;
                m_plot->yAxis->setRange(y.lower - pad, y.upper + pad);
            }
        } else {
            // No points (a new run, or every series unchecked): the default view, not the
            // previous run's axes.
            m_plot->xAxis->setRange(0, 1);
            m_plot->yAxis->setRange(m_logY ? 0.1 : 0.0, 1.0);
        }
    }
    // Points and not one value among them: the run does not log this metric.
    bool points = false, values = false;
    for (auto& s : m_series) {
        points = points || !s->raw.empty();
        values = values || s->ema.count > 0;
    }
    const bool absent = points && !values && !m_absentText.isEmpty();
    const bool empty = !points && !m_emptyText.isEmpty();
    if ((absent || empty) && !m_absentLabel) {
        m_absentLabel = new QCPItemText(m_plot);
        m_absentLabel->position->setType(QCPItemPosition::ptAxisRectRatio);
        m_absentLabel->position->setCoords(0.5, 0.5);
        m_absentLabel->setPositionAlignment(Qt::AlignCenter);
    }
    if (m_absentLabel) {
        m_absentLabel->setText(empty ? m_emptyText : m_absentText);
        m_absentLabel->setColor(palette().color(QPalette::PlaceholderText));
        m_absentLabel->setVisible(absent || empty);
    }
    m_inFlush = false;
    m_plot->replot(immediate ? QCustomPlot::rpImmediateRefresh : QCustomPlot::rpQueuedReplot);
}

void LivePlot::flushNow()
{
    m_timer.stop();
    flush(true);
}

void LivePlot::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (m_deferredWhileHidden && !m_timer.isActive())
        m_timer.start();
}

void LivePlot::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    // The pixel width decides the decimation: redo long series for the new width.
    for (auto& s : m_series)
        if (s->decimated || s->raw.size() > qsizetype(kDecimateAbovePointsPerPixel) * pixelWidth())
            markDirty(*s, true);
}

} // namespace shard::widgets
