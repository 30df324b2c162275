// ComparePage: one LivePlot series per run, rebuilt when the x axis changes.
#include "widgets/compare_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <cmath>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QImage>
#include <QLabel>
#include <QListWidget>
#include <QPainter>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>

#include "widgets/qcp.h"

#include "jobs/csv.h"
#include "protocol/config_diff.h"

#include "widgets/background.h"
#include "widgets/live_plot.h"
#include "widgets/message_bar.h"
#include "widgets/theme.h"

namespace shard::widgets {

ComparePage::ComparePage(QWidget* parent)
    : QWidget(parent)
{
    m_runList = new QListWidget(this);
    m_runList->setAccessibleName(tr("Runs to compare"));
    m_runList->setMinimumWidth(180);
    m_add = new QPushButton(tr("&Add run folder…"), this);
    m_clear = new QPushButton(tr("C&lear"), this);
    m_smoothing = new QSlider(Qt::Horizontal, this);
    m_smoothing->setRange(0, 99);
    m_smoothing->setValue(0);
    m_smoothing->setAccessibleName(tr("Smoothing"));
    m_smoothing->setMinimumWidth(120);
    m_smoothingValue = new QLabel("0.00", this);
    m_xAxisBox = new QComboBox(this);
    m_xAxisBox->addItem(tr("step"), int(XAxisKind::Step));
    m_xAxisBox->addItem(tr("tokens"), int(XAxisKind::Tokens));
    m_xAxisBox->addItem(tr("wall time"), int(XAxisKind::WallTime));
    m_xAxisBox->setAccessibleName(tr("X axis"));
    m_log = new QCheckBox(tr("Lo&g scale"), this);
    m_png = new QPushButton(tr("Export &PNG…"), this);
    m_csv = new QPushButton(tr("Export &CSV…"), this);
    m_message = new MessageBar(this);

    m_loss = new LivePlot(tr("Loss"), this);
    m_loss->setYAxisLabel(tr("loss"));
    m_loss->setLegendVisible(true);
    m_memoryPlot = new LivePlot(tr("Peak memory per rank"), this);
    m_memoryPlot->setYIncludesZero(true);
    m_throughput = new LivePlot(tr("Throughput"), this);
    m_throughput->setYAxisLabel(tr("tokens/s"));
    m_throughput->setYIncludesZero(true);
    m_diff = new QTableWidget(this);
    m_diff->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_diff->setAlternatingRowColors(true);
    m_diff->verticalHeader()->setVisible(false);
    m_diff->setAccessibleName(tr("Config values that differ"));
    m_samples = new QTableWidget(this);
    m_samples->setObjectName("samples");
    m_samples->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_samples->setWordWrap(true);
    m_samples->verticalHeader()->setVisible(false);
    m_samples->horizontalHeader()->setStretchLastSection(true);
    m_samples->setAccessibleName(tr("Sample completions by prompt"));
    m_scalarTag = new QComboBox(this);
    m_scalarTag->setObjectName("scalarTag");
    m_scalarTag->setAccessibleName(tr("Scalar to compare"));
    m_scalarTag->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_scalarPlot = new LivePlot(tr("Scalar"), this);
    m_scalarPlot->setLegendVisible(true);
    m_scalarsNote = new QLabel(tr("These runs record no further scalars (preference runs record "
                                  "their rewards; imported runs every TensorBoard tag)."),
        this);
    m_scalarsNote->setWordWrap(true);

    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("&Smoothing"), this));
    qobject_cast<QLabel*>(controls->itemAt(0)->widget())->setBuddy(m_smoothing);
    controls->addWidget(m_smoothing);
    controls->addWidget(m_smoothingValue);
    controls->addSpacing(12);
    auto* xLabel = new QLabel(tr("&X axis"), this);
    xLabel->setBuddy(m_xAxisBox);
    controls->addWidget(xLabel);
    controls->addWidget(m_xAxisBox);
    controls->addWidget(m_log);
    controls->addStretch(1);
    controls->addWidget(m_png);
    controls->addWidget(m_csv);

    auto* left = new QWidget(this);
    auto* leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->addWidget(new QLabel(tr("Runs"), left));
    leftLayout->addWidget(m_runList, 1);
    auto* leftButtons = new QHBoxLayout;
    leftButtons->addWidget(m_add);
    leftButtons->addWidget(m_clear);
    leftLayout->addLayout(leftButtons);

    auto* charts = new QSplitter(Qt::Horizontal, this);
    charts->addWidget(m_loss);
    auto* side = new QSplitter(Qt::Vertical, this);
    side->addWidget(m_memoryPlot);
    side->addWidget(m_throughput);
    charts->addWidget(side);
    charts->setStretchFactor(0, 3);
    charts->setStretchFactor(1, 2);
    auto* right = new QSplitter(Qt::Vertical, this);
    right->addWidget(charts);
    auto* diffBox = new QWidget(this);
    auto* diffLayout = new QVBoxLayout(diffBox);
    diffLayout->setContentsMargins(0, 0, 0, 0);
    diffLayout->addWidget(new QLabel(tr("Config values that differ"), diffBox));
    diffLayout->addWidget(m_diff);
    auto* bottom = new QTabWidget(this);
    bottom->addTab(diffBox, tr("Settings"));
    bottom->addTab(m_samples, tr("Samples"));
    auto* scalarsBox = new QWidget(this);
    auto* scalarsLayout = new QVBoxLayout(scalarsBox);
    scalarsLayout->setContentsMargins(0, 0, 0, 0);
    auto* tagRow = new QHBoxLayout;
    auto* tagLabel = new QLabel(tr("&Tag"), scalarsBox);
    tagLabel->setBuddy(m_scalarTag);
    tagRow->addWidget(tagLabel);
    tagRow->addWidget(m_scalarTag);
    tagRow->addStretch(1);
    scalarsLayout->addLayout(tagRow);
    scalarsLayout->addWidget(m_scalarsNote);
    scalarsLayout->addWidget(m_scalarPlot, 1);
    bottom->addTab(scalarsBox, tr("Scalars"));
    right->addWidget(bottom);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 1);

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(0, 0);
    split->setStretchFactor(1, 1);
    split->setSizes({220, 900});

    // Where to start, while there is nothing to compare.
    m_emptyHint = new QLabel(tr("Nothing to compare yet: select runs on the Runs page (Ctrl+4) "
                                "and press “Compare selected”, or add a run folder here."),
        this);
    m_emptyHint->setObjectName("emptyHint");
    m_emptyHint->setWordWrap(true);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(controls);
    layout->addWidget(m_message);
    layout->addWidget(m_emptyHint);
    layout->addWidget(split, 1);

    setTabOrder(m_smoothing, m_xAxisBox);
    setTabOrder(m_xAxisBox, m_log);
    setTabOrder(m_log, m_png);
    setTabOrder(m_png, m_csv);
    setTabOrder(m_csv, m_runList);
    setTabOrder(m_runList, m_add);
    setTabOrder(m_add, m_clear);
    setTabOrder(m_clear, m_diff);

    connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
        m_smoothingValue->setText(QString::number(v / 100.0, 'f', 2));
        // Every series, not the loss alone.
        m_loss->setSmoothing(v / 100.0);
        m_memoryPlot->setSmoothing(v / 100.0);
        m_throughput->setSmoothing(v / 100.0);
        m_scalarPlot->setSmoothing(v / 100.0);
    });
    connect(m_scalarTag, qOverload<int>(&QComboBox::currentIndexChanged), this,
        [this] { rebuildScalars(); });
    connect(m_xAxisBox, qOverload<int>(&QComboBox::currentIndexChanged), this,
        [this] { setXAxis(XAxisKind(m_xAxisBox->currentData().toInt())); });
    connect(m_log, &QCheckBox::toggled, this, [this](bool on) { m_loss->setLogY(on); });
    connect(m_add, &QPushButton::clicked, this, &ComparePage::browse);
    connect(m_clear, &QPushButton::clicked, this, &ComparePage::removeAllRuns);
    connect(m_runList, &QListWidget::itemChanged, this, [this](QListWidgetItem* item) {
        const int row = m_runList->row(item);
        if (row < 0 || size_t(row) >= m_checked.size())
            return;
        const bool checked = item->checkState() == Qt::Checked;
        if (m_checked[size_t(row)] == checked)
            return;
        m_checked[size_t(row)] = checked;
        m_loss->setSeriesVisible(row, checked);
        m_memoryPlot->setSeriesVisible(row, checked);
        m_throughput->setSeriesVisible(row, checked);
        rebuildScalars();
        rebuildDifferences();
    });
    connect(m_png, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export PNG"), "compare.png", tr("PNG images (*.png)"));
        if (path.isEmpty())
            return;
        const QString error = exportPng(path);
        if (error.isEmpty())
            m_message->showMessage(
                tr("Wrote %1").arg(pngFilesFor(path).join(", ")), MessageBar::Kind::Info);
        else
            m_message->showMessage(error);
    });
    connect(m_csv, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export CSV"), "compare.csv", tr("CSV files (*.csv)"));
        if (path.isEmpty())
            return;
        const QString error = exportCsv(path);
        if (error.isEmpty())
            m_message->showMessage(tr("Wrote %1").arg(path), MessageBar::Kind::Info);
        else
            m_message->showMessage(error);
    });
}

QString ComparePage::messageText() const
{
    return m_message->text();
}

void ComparePage::browse()
{
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Add a run folder"));
    if (!dir.isEmpty())
        addRunDirectory(dir);
}

void ComparePage::addRunDirectory(const QString& directory)
{
    ++m_loading;
    m_message->showMessage(tr("Loading %1…").arg(directory), MessageBar::Kind::Info);
    runInBackground(
        this, [directory] { return jobs::loadRunDirectory(directory); },
        [this](jobs::Result<jobs::RunSeries> result) {
            --m_loading;
            if (!result) {
                m_message->showMessage(result.error());
                Q_EMIT loadFailed(result.error());
                return;
            }
            m_message->clearMessage();
            addRun(std::move(result).value());
        });
}

void ComparePage::addRun(jobs::RunSeries run)
{
    const QString id = run.id;
    auto it = std::find_if(
        m_runs.begin(), m_runs.end(), [&](const jobs::RunSeries& r) { return r.id == id; });
    if (it != m_runs.end()) {
        *it = std::move(run);
    } else {
        m_runs.push_back(std::move(run));
        m_checked.push_back(true);
    }
    QSignalBlocker block(m_runList);
    m_runList->clear();
    for (size_t i = 0; i < m_runs.size(); ++i) {
        auto* item = new QListWidgetItem(m_runs[i].name, m_runList);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(m_checked[i] ? Qt::Checked : Qt::Unchecked);
        item->setToolTip(m_runs[i].directory);
        QPixmap swatch(12, 12);
        swatch.fill(Theme::seriesColor(int(i)));
        item->setIcon(QIcon(swatch));
    }
    rebuildPlots();
    rebuildDifferences();
    m_emptyHint->setVisible(m_runs.empty());
    Q_EMIT runAdded(id);
}

void ComparePage::removeAllRuns()
{
    m_runs.clear();
    m_checked.clear();
    m_runList->clear();
    rebuildPlots();
    rebuildDifferences();
    m_emptyHint->setVisible(true);
}

void ComparePage::setRunChecked(int index, bool checked)
{
    if (auto* item = m_runList->item(index))
        item->setCheckState(checked ? Qt::Checked : Qt::Unchecked);
}

void ComparePage::setSmoothing(double weight)
{
    m_smoothing->setValue(int(weight * 100 + 0.5));
}

void ComparePage::setXAxis(XAxisKind kind)
{
    m_xAxis = kind;
    const int index = m_xAxisBox->findData(int(kind));
    if (index != m_xAxisBox->currentIndex()) {
        m_xAxisBox->setCurrentIndex(index); // re-enters through the signal
        return;
    }
    rebuildPlots();
}

void ComparePage::setLogY(bool on)
{
    m_log->setChecked(on);
}

void ComparePage::rebuildPlots()
{
    m_loss->removeAllSeries();
    m_memoryPlot->removeAllSeries();
    m_throughput->removeAllSeries();
    m_loss->setXAxisKind(m_xAxis);
    m_memoryPlot->setXAxisKind(m_xAxis);
    m_throughput->setXAxisKind(m_xAxis);
    double maxPeak = 0.0;
    for (const jobs::RunSeries& run : m_runs)
        for (double b : run.peakBytes)
            maxPeak = std::max(maxPeak, b);
    // MiB for tiny models, GiB for real ones.
    const bool mib = maxPeak < 1024.0 * 1024.0 * 1024.0;
    const double unit = mib ? 1024.0 * 1024.0 : 1024.0 * 1024.0 * 1024.0;
    m_memoryPlot->setYAxisLabel(mib ? tr("MiB") : tr("GiB"));
    for (size_t i = 0; i < m_runs.size(); ++i) {
        const jobs::RunSeries& run = m_runs[i];
        const QColor color = Theme::seriesColor(int(i));
        const auto& x = xColumn(run, m_xAxis);
        const int l = m_loss->addSeries(run.name, color);
        m_loss->setPoints(l, x, run.loss);
        m_loss->setSeriesVisible(l, m_checked[i]);
        QVector<double> gib(run.peakBytes.size());
        for (qsizetype k = 0; k < gib.size(); ++k)
            gib[k] = run.peakBytes[k] / unit;
        const int m = m_memoryPlot->addSeries(run.name, color);
        m_memoryPlot->setPoints(m, x, gib);
        m_memoryPlot->setSeriesVisible(m, m_checked[i]);
        const int t = m_throughput->addSeries(run.name, color);
        m_throughput->setPoints(t, x, run.tokensPerSec);
        m_throughput->setSeriesVisible(t, m_checked[i]);
    }
    rebuildScalars();
}

QStringList ComparePage::scalarTags() const
{
    QStringList tags;
    for (int i = 0; i < m_scalarTag->count(); ++i)
        tags << m_scalarTag->itemText(i);
    return tags;
}

void ComparePage::setScalarTag(const QString& tag)
{
    m_scalarTag->setCurrentText(tag);
}

void ComparePage::rebuildScalars()
{
    // The union of the runs' tags; the tag picked stays picked while a run has it (a preference
    // run's margin first).
    QStringList tags;
    for (const jobs::RunSeries& run : m_runs)
        for (auto it = run.scalars.begin(); it != run.scalars.end(); ++it)
            if (!tags.contains(it.key()))
                tags << it.key();
    tags.sort();
    QString tag = m_scalarTag->currentText();
    if (!tags.contains(tag))
        tag = tags.contains("train/rewards/margins") ? QStringLiteral("train/rewards/margins")
                                                     : tags.value(0);
    if (tags != scalarTags()) {
        const QSignalBlocker block(m_scalarTag);
        m_scalarTag->clear();
        m_scalarTag->addItems(tags);
    }
    {
        const QSignalBlocker block(m_scalarTag);
        m_scalarTag->setCurrentText(tag);
    }
    m_scalarTag->setEnabled(!tags.isEmpty());
    m_scalarsNote->setVisible(tags.isEmpty());
    m_scalarPlot->removeAllSeries();
    m_scalarPlot->setTitle(tag.isEmpty() ? tr("Scalar") : tag);
    m_scalarPlot->setYAxisLabel(tag);
    for (size_t i = 0; i < m_runs.size(); ++i) {
        const int k = m_scalarPlot->addSeries(m_runs[i].name, Theme::seriesColor(int(i)));
        const auto it = m_runs[i].scalars.find(tag);
        if (it != m_runs[i].scalars.end())
            m_scalarPlot->setPoints(k, it->step, it->value);
        m_scalarPlot->setSeriesVisible(k, m_checked[i]);
    }
}

void ComparePage::rebuildSamples()
{
    std::vector<const jobs::RunSeries*> runs;
    QStringList names;
    for (size_t i = 0; i < m_runs.size(); ++i)
        if (m_checked[i]) {
            runs.push_back(&m_runs[i]);
            names << m_runs[i].name;
        }
    const auto rows = jobs::compareSamples(runs);
    m_samples->clear();
    m_samples->clearSpans();
    if (rows.empty()) {
        // Where samples come from, rather than a bare header.
        m_samples->setColumnCount(1);
        m_samples->setHorizontalHeaderLabels({tr("samples")});
        m_samples->setRowCount(1);
        m_samples->setItem(0, 0,
            new QTableWidgetItem(runs.empty()
                    ? tr("No runs to compare yet.")
                    : tr("No sample completions in these runs. A run writes them when it is "
                         "started with --sample-every N and --sample-prompts FILE.")));
        m_samples->resizeRowsToContents();
        return;
    }
    m_samples->setColumnCount(int(names.size()) + 1);
    m_samples->setHorizontalHeaderLabels(QStringList {tr("prompt")} + names);
    m_samples->setRowCount(int(rows.size()));
    for (int r = 0; r < int(rows.size()); ++r) {
        const auto& row = rows[size_t(r)];
        m_samples->setItem(r, 0, new QTableWidgetItem(row.prompt));
        for (int c = 0; c < row.completions.size(); ++c) {
            auto* item = new QTableWidgetItem(row.completions[c]);
            if (row.steps[c] >= 0)
                item->setToolTip(tr("step %1").arg(row.steps[c]));
            m_samples->setItem(r, c + 1, item);
        }
    }
    m_samples->resizeRowsToContents();
}

void ComparePage::rebuildDifferences()
{
    rebuildSamples();
    std::vector<nlohmann::json> configs;
    QStringList names;
    for (size_t i = 0; i < m_runs.size(); ++i) {
        if (!m_checked[i])
            continue;
        configs.push_back(m_runs[i].config);
        names.append(m_runs[i].name);
    }
    const auto diffs = protocol::differingConfigValues(configs);
    m_diff->clear();
    m_diff->setColumnCount(int(names.size()) + 1);
    m_diff->setHorizontalHeaderLabels(QStringList {tr("setting")} + names);
    m_diff->setRowCount(int(diffs.size()));
    for (int r = 0; r < int(diffs.size()); ++r) {
        const auto& d = diffs[size_t(r)];
        m_diff->setItem(r, 0, new QTableWidgetItem(QString::fromStdString(d.key)));
        for (size_t c = 0; c < d.values.size(); ++c)
            m_diff->setItem(r, int(c) + 1,
                new QTableWidgetItem(d.values[c].empty() ? QStringLiteral("—")
                                                         : QString::fromStdString(d.values[c])));
    }
    m_diff->resizeColumnsToContents();
    if (names.size() >= 2 && diffs.empty()) {
        m_diff->setRowCount(1);
        m_diff->setItem(0, 0, new QTableWidgetItem(tr("(all settings are equal)")));
    }
}

QString ComparePage::exportPng(const QString& path)
{
    flushCharts();
    // Every chart shown, at its size on screen or larger: loss on the left, memory and
    // throughput stacked on the right, as on the page; each also on its own next to it.
    const int w = std::max(m_loss->width(), 800);
    const int h = std::max(m_loss->height(), 500);
    const int sideW = std::max(m_memoryPlot->width(), w * 2 / 3);
    QImage all(w + sideW, h, QImage::Format_ARGB32);
    all.fill(palette().color(QPalette::Window));
    {
        QPainter p(&all);
        p.drawPixmap(0, 0, m_loss->customPlot()->toPixmap(w, h));
        p.drawPixmap(w, 0, m_memoryPlot->customPlot()->toPixmap(sideW, h / 2));
        p.drawPixmap(w, h / 2, m_throughput->customPlot()->toPixmap(sideW, h - h / 2));
    }
    if (!all.save(path, "PNG"))
        return tr("Could not write %1; check that the folder exists and is writable.").arg(path);
    // Alone, a chart names its runs itself: with its legend.
    const QStringList files = pngFilesFor(path);
    LivePlot* const single[] = {m_memoryPlot, m_throughput};
    for (int i = 0; i < 2; ++i) {
        LivePlot* plot = single[i];
        const bool legend = plot->legendVisible();
        plot->setLegendVisible(true);
        const bool saved = plot->customPlot()->savePng(files[i + 1], w, h);
        plot->setLegendVisible(legend);
        if (!saved)
            return tr("Could not write %1; check that the folder is writable.").arg(files[i + 1]);
    }
    return {};
}

QStringList ComparePage::pngFilesFor(const QString& path)
{
    const QFileInfo info(path);
    return {path, info.dir().filePath(info.completeBaseName() + "-memory.png"),
        info.dir().filePath(info.completeBaseName() + "-throughput.png")};
}

QString ComparePage::exportCsv(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text))
        return tr("Could not write %1: %2").arg(path, file.errorString());
    QTextStream out(&file);
    out << "run,step,tokens,wall_time,loss,eval_loss,lr,grad_norm,tokens_per_sec,step_time,"
           "comm_bytes,peak_bytes\n";
    const auto num = jobs::csvNumber;
    for (size_t i = 0; i < m_runs.size(); ++i) {
        if (!m_checked[i])
            continue;
        const jobs::RunSeries& r = m_runs[i];
        const QString name = jobs::csvText(r.name);
        for (qsizetype k = 0; k < r.size(); ++k)
            out << name << ',' << qint64(r.step[k]) << ',' << qint64(r.tokens[k]) << ','
                << num(r.wallTimeSec[k]) << ',' << num(r.loss[k]) << ','
                << num(r.evalLoss.value(k, qQNaN())) << ',' << num(r.lr.value(k)) << ','
                << num(r.gradNorm.value(k)) << ',' << num(r.tokensPerSec.value(k)) << ','
                << num(r.stepTimeSec.value(k, qQNaN())) << ',' << qint64(r.commBytes.value(k))
                << ',' << qint64(r.peakBytes.value(k)) << '\n';
    }
    out.flush();
    if (file.error() != QFileDevice::NoError)
        return tr("Could not write %1: %2").arg(path, file.errorString());
    return {};
}

void ComparePage::flushCharts()
{
    for (LivePlot* p : {m_loss, m_memoryPlot, m_throughput, m_scalarPlot})
        p->flushNow();
}

void ComparePage::restyle()
{
    for (LivePlot* p : {m_loss, m_memoryPlot, m_throughput, m_scalarPlot})
        p->restyle();
}

} // namespace shard::widgets
