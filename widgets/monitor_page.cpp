// MonitorPage: the run service's follow updates feed LivePlots and the per-rank memory chart.
#include "widgets/monitor_page.h"

#include <algorithm>
#include <cmath>

#include <QComboBox>
#include <QCoreApplication>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>

#include "jobs/preflight.h"
#include "protocol/memory_categories.h"
#include "widgets/background.h"
#include "widgets/live_plot.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/message_bar.h"
#include "widgets/theme.h"

namespace shard::widgets {

QStringList memoryCategoryNames()
{
    QStringList names;
    for (const protocol::MemoryCategory& c : protocol::memoryCategories())
        names << QCoreApplication::translate("shard::protocol::MemoryCategory", c.label);
    return names;
}

std::vector<double> memoryByCategory(const protocol::RankMemory& m)
{
    std::vector<double> bytes;
    for (const protocol::MemoryCategory& c : protocol::memoryCategories())
        bytes.push_back(double(m.*c.bytes));
    return bytes;
}

MonitorPage::MonitorPage(QWidget* parent)
    : QWidget(parent)
{
    m_path = new QLineEdit(this);
    m_path->setPlaceholderText(tr("Run folder (holds run.json and metrics.jsonl)"));
    m_path->setAccessibleName(tr("Run folder"));
    m_open = new QPushButton(tr("&Open run folder…"), this);
    m_stop = new QPushButton(tr("S&top run"), this);
    m_stop->setObjectName("stopButton");
    m_stop->setEnabled(false);
    m_resume = new QPushButton(tr("&Resume"), this);
    m_resume->setObjectName("resumeButton");
    m_resume->setToolTip(tr("Start this run again from its latest complete checkpoint"));
    m_resume->setEnabled(false);
    m_status = new QLabel(tr("No run open"), this);
    m_progress = new QProgressBar(this);
    m_progress->setMinimumWidth(160);
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_progress->setFormat(QString()); // no run: no "step 0 of 1"
    m_eta = new QLabel(this);
    m_eta->setMinimumWidth(120);
    m_checkpointCost = new QLabel(this);
    m_checkpointCost->setObjectName("checkpointCost");
    m_checkpointCost->setToolTip(
        tr("What a checkpoint costs: its size on disk (every rank's shard), how long rank 0 "
           "took to write it, and how much training a failure loses at most between two "
           "checkpoints (the measured step time x the checkpoint interval). A preemption "
           "signal (SIGUSR1) writes one on demand."));
    m_smoothing = new QSlider(Qt::Horizontal, this);
    m_smoothing->setRange(0, 99);
    m_smoothing->setValue(60);
    m_smoothing->setMaximumWidth(160);
    m_smoothing->setAccessibleName(tr("Loss smoothing"));
    m_message = new MessageBar(this);
    m_running = new QComboBox(this);
    m_running->setObjectName("runningRuns");
    m_running->setAccessibleName(tr("Running runs"));
    m_runningLabel = new QLabel(tr("Running now:"), this);
    m_runningLabel->setBuddy(m_running);
    m_running->setVisible(false);
    m_runningLabel->setVisible(false);

    m_loss = new LivePlot(tr("Loss"), this);
    m_loss->addSeries(tr("train loss"), Theme::seriesColor(0));
    m_loss->addSeries(tr("eval loss"), Theme::seriesColor(3));
    m_loss->setSmoothing(0.6);
    m_loss->setYAxisLabel(tr("loss"));
    m_loss->setLegendVisible(true);
    m_lr = new LivePlot(tr("Learning rate"), this);
    m_lr->addSeries(tr("lr"), Theme::seriesColor(2));
    m_gradNorm = new LivePlot(tr("Gradient norm"), this);
    m_gradNorm->addSeries(tr("grad norm"), Theme::seriesColor(4));
    m_gradNorm->setSmoothing(0.6);
    m_throughput = new LivePlot(tr("Throughput"), this);
    m_throughput->setYIncludesZero(true);
    m_throughput->addSeries(tr("tokens/s"), Theme::seriesColor(1));
    m_throughput->setYAxisLabel(tr("tokens/s"));
    m_throughput->setSmoothing(0.6);
    m_margin = new LivePlot(tr("Reward margin"), this);
    m_margin->setObjectName("marginPlot");
    m_margin->addSeries(tr("chosen − rejected"), Theme::seriesColor(0));
    m_margin->setYAxisLabel(tr("margin"));
    m_margin->setSmoothing(0.6);
    m_accuracy = new LivePlot(tr("Reward accuracy"), this);
    m_accuracy->setObjectName("accuracyPlot");
    m_accuracy->addSeries(tr("train"), Theme::seriesColor(1));
    m_accuracy->addSeries(tr("eval"), Theme::seriesColor(3));
    m_accuracy->setYIncludesZero(true);
    m_accuracy->setYAxisLabel(tr("chosen preferred"));
    m_accuracy->setLegendVisible(true);
    m_accuracy->setSmoothing(0.6);
    // A command run's engine may log no learning rate, gradient norm or throughput.
    for (LivePlot* p : {m_lr, m_gradNorm, m_throughput})
        p->setAbsentText(tr("Not logged by this run"));
    showNoRun();
    m_memory = new MemoryBarChart(tr("Memory per rank"), this);
    m_memory->setCategories(memoryCategoryNames());
    m_memory->setPredictionLabel(tr("planned"));
    m_memory->setAxisLabel(tr("%1 per rank"));
    m_deviceMemory = new QLabel(this);
    m_deviceMemory->setObjectName("deviceMemory");
    m_deviceMemory->setWordWrap(true);
    m_deviceMemory->hide();

    m_log = new QPlainTextEdit(this);
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(2000);
    m_log->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_log->setPlaceholderText(
        tr("The tail of a rank's log appears here: the rank that failed first, else rank 0."));
    m_logRank = new QComboBox(this);
    m_logRank->setObjectName("logRank");
    m_logRank->setAccessibleName(tr("Log of rank"));
    m_logRank->addItem(tr("failing rank (else rank 0)"), jobs::RunService::kFailingRank);
    m_logRank->setToolTip(tr("Whose log to show"));
    m_events = new QTreeWidget(this);
    m_events->setHeaderLabels({tr("time"), tr("step"), tr("event"), tr("message")});
    m_events->setRootIsDecorated(false);
    m_events->header()->setStretchLastSection(true);
    m_samples = new QTreeWidget(this);
    m_samples->setObjectName("samples");
    m_samples->setHeaderLabels({tr("step"), tr("prompt"), tr("completion")});
    m_samples->setRootIsDecorated(false);
    m_samples->setWordWrap(true);
    m_samples->header()->setStretchLastSection(true);

    auto* top = new QHBoxLayout;
    top->addWidget(m_path, 1);
    top->addWidget(m_open);
    top->addWidget(m_stop);
    top->addWidget(m_resume);
    top->addWidget(m_runningLabel);
    top->addWidget(m_running);
    auto* progressRow = new QHBoxLayout;
    progressRow->addWidget(m_status);
    progressRow->addWidget(m_progress, 1);
    progressRow->addWidget(m_eta);
    progressRow->addWidget(m_checkpointCost);
    progressRow->addWidget(new QLabel(tr("Smoothing"), this));
    progressRow->addWidget(m_smoothing);

    auto* charts = new QWidget(this);
    auto* grid = new QGridLayout(charts);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(m_loss, 0, 0);
    grid->addWidget(m_lr, 0, 1);
    auto* memoryBox = new QWidget(this);
    auto* memoryLayout = new QVBoxLayout(memoryBox);
    memoryLayout->setContentsMargins(0, 0, 0, 0);
    memoryLayout->addWidget(m_memory, 1);
    memoryLayout->addWidget(m_deviceMemory);
    grid->addWidget(memoryBox, 0, 2, 3, 1);
    grid->addWidget(m_gradNorm, 1, 0);
    grid->addWidget(m_throughput, 1, 1);
    grid->addWidget(m_margin, 2, 0);
    grid->addWidget(m_accuracy, 2, 1);
    showPreferenceCharts(false);
    grid->setColumnStretch(0, 3);
    grid->setColumnStretch(1, 3);
    grid->setColumnStretch(2, 2);

    auto* logBox = new QWidget(this);
    auto* logLayout = new QVBoxLayout(logBox);
    logLayout->setContentsMargins(0, 0, 0, 0);
    auto* logRow = new QHBoxLayout;
    m_logLabel = new QLabel(tr("Log of"), logBox);
    m_logLabel->setBuddy(m_logRank);
    logRow->addWidget(m_logLabel);
    logRow->addWidget(m_logRank);
    logRow->addStretch(1);
    logLayout->addLayout(logRow);
    logLayout->addWidget(m_log, 1);
    // Every scalar a run logged under its own tag (imported runs): a tag picker and its curve.
    auto* scalarsBox = new QWidget(this);
    auto* scalarsLayout = new QVBoxLayout(scalarsBox);
    scalarsLayout->setContentsMargins(0, 0, 0, 0);
    auto* scalarRow = new QHBoxLayout;
    m_scalarTag = new QComboBox(scalarsBox);
    m_scalarTag->setObjectName("scalarTag");
    m_scalarTag->setAccessibleName(tr("Scalar"));
    m_scalarTag->setMinimumContentsLength(24);
    auto* scalarLabel = new QLabel(tr("Scalar"), scalarsBox);
    scalarLabel->setBuddy(m_scalarTag);
    m_scalarsNote
        = new QLabel(tr("This run has no other scalars: runs imported from TensorBoard files, "
                        "trainer_state.json or logs keep every scalar they logged under its tag."),
            scalarsBox);
    m_scalarsNote->setWordWrap(true);
    scalarRow->addWidget(scalarLabel);
    scalarRow->addWidget(m_scalarTag);
    scalarRow->addWidget(m_scalarsNote, 1);
    m_scalars = new LivePlot(QString(), scalarsBox);
    m_scalars->addSeries(tr("value"), Theme::seriesColor(5));
    scalarsLayout->addLayout(scalarRow);
    scalarsLayout->addWidget(m_scalars, 1);
    auto* tabs = new QTabWidget(this);
    m_tabs = tabs;
    tabs->addTab(logBox, tr("&Log"));
    tabs->addTab(m_events, tr("&Events"));
    tabs->addTab(m_samples, tr("Sa&mples"));
    tabs->addTab(scalarsBox, tr("Scala&rs"));
    connect(tabs, &QTabWidget::currentChanged, this, [this] { requestScalars(); });
    connect(m_scalarTag, qOverload<int>(&QComboBox::activated), this, [this] { requestScalars(); });
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(charts);
    split->addWidget(tabs);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(m_message);
    layout->addLayout(progressRow);
    layout->addWidget(split, 1);

    setTabOrder(m_path, m_open);
    setTabOrder(m_open, m_stop);
    setTabOrder(m_stop, m_resume);
    setTabOrder(m_resume, m_smoothing);
    setTabOrder(m_smoothing, tabs);

    connect(m_open, &QPushButton::clicked, this, &MonitorPage::browse);
    connect(m_path, &QLineEdit::returnPressed, this,
        [this] { openRunDirectory(m_path->text().trimmed()); });
    connect(m_stop, &QPushButton::clicked, this, &MonitorPage::stopRun);
    connect(m_running, qOverload<int>(&QComboBox::activated), this, [this](int index) {
        const qint64 id = m_running->itemData(index).toLongLong();
        if (id > 0 && id != m_storeRunId)
            openStoreRun(id);
    });
    connect(m_resume, &QPushButton::clicked, this, &MonitorPage::resumeRun);
    m_attachRetry = new QTimer(this);
    m_attachRetry->setSingleShot(true);
    m_attachRetry->setInterval(kAttachRetryMs);
    connect(m_attachRetry, &QTimer::timeout, this, [this] {
        if (!m_attaching.isEmpty() && m_store)
            m_store->attachRunDirectory(m_attaching);
    });
    connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
        // Like TensorBoard, smoothing applies to every noisy scalar; the schedule is exact.
        for (LivePlot* p : {m_loss, m_gradNorm, m_throughput, m_margin, m_accuracy})
            p->setSmoothing(v / 100.0);
    });
    connect(m_logRank, qOverload<int>(&QComboBox::activated), this, [this] {
        if (m_store)
            m_store->setLogRank(m_logRank->currentData().toInt());
    });
}

QString MonitorPage::runDirectory() const
{
    return m_where;
}

QStringList MonitorPage::scalarTags() const
{
    QStringList tags;
    for (int i = 0; i < m_scalarTag->count(); ++i)
        tags << m_scalarTag->itemText(i);
    return tags;
}

void MonitorPage::showScalar(const QString& tag)
{
    m_scalarTag->setCurrentText(tag);
    m_tabs->setCurrentWidget(m_scalars->parentWidget());
    requestScalars();
}

int MonitorPage::scalarPointCount() const
{
    return int(m_scalars->series(0).size());
}

void MonitorPage::requestScalars()
{
    // Loaded when the tab is shown (and again as points arrive while it is).
    if (m_store && m_storeRunId != 0 && m_tabs->currentWidget() == m_scalars->parentWidget())
        m_store->loadScalars(m_storeRunId, m_scalarTag->currentText(), m_storeTicket);
}

void MonitorPage::setStore(jobs::RunService* store)
{
    m_store = store;
    connect(store, &jobs::RunService::scalarsLoaded, this,
        [this](quint64 ticket, qint64 runId, const QStringList& tags, const QString& tag,
            const jobs::ScalarSeries& series) {
            if (ticket != m_storeTicket || runId != m_storeRunId)
                return;
            if (scalarTags() != tags) {
                const QSignalBlocker block(m_scalarTag);
                m_scalarTag->clear();
                m_scalarTag->addItems(tags);
            }
            m_scalarTag->setCurrentText(tag);
            m_scalarTag->setVisible(!tags.isEmpty());
            m_scalarsNote->setVisible(tags.isEmpty());
            m_scalars->setTitle(tag);
            m_scalars->setYAxisLabel(tag);
            m_scalars->setPoints(0, series.step, series.value);
        });
    connect(store, &jobs::RunService::runFollowed, this,
        [this](quint64 ticket, const jobs::FollowUpdate& u) {
            if (m_storeRunId == 0 || ticket != m_storeTicket)
                return;
            onUpdate(u);
            if (u.stateChanged)
                onStoreState(u.state);
        });
    connect(store, &jobs::RunService::runAttached, this,
        [this](const QString& dir, qint64 id, const QString& error) {
            if (dir != m_attaching)
                return;
            if (id == 0) {
                // Not a run (yet): a launch may be about to write it, as `tail -F` waits for a
                // file; the folder is tried again every second while the page shows it.
                if (m_message->text() != error)
                    m_message->showMessage(error);
                m_status->setText(tr("Not a run (yet)"));
                m_attachRetry->start();
                return;
            }
            m_attaching.clear();
            openStoreRun(id);
        });
    connect(store, &jobs::RunService::runDeleted, this, [this](qint64 runId, const QString&) {
        if (runId == 0 || runId != m_storeRunId)
            return;
        // The run shown is gone from the store: the page is emptied, not left on its last state.
        reset();
        m_storeRunId = 0;
        ++m_storeTicket;
        m_where.clear();
        m_path->clear();
        m_stop->setEnabled(false);
        showNoRun();
        m_message->showMessage(
            tr("Run %1 was deleted from the run store.").arg(runId), MessageBar::Kind::Info);
    });
    connect(store, &jobs::RunService::runError, this, [this](qint64 runId, const QString& message) {
        if (runId == m_storeRunId && !m_finished)
            m_message->showMessage(message);
    });
    connect(store, &jobs::RunService::resumed, this,
        [this](qint64 from, qint64 to, const QString& error) {
            if (!m_awaitingResume || from != m_storeRunId)
                return;
            m_awaitingResume = false;
            if (!error.isEmpty()) {
                m_message->showMessage(tr("Cannot resume: %1").arg(error));
                m_resume->setEnabled(m_storeResumable && m_finished);
            } else {
                // The same record goes on: follow it again from its start.
                openStoreRun(to);
                m_status->setText(tr("Resuming…"));
                m_message->showMessage(
                    tr("Resumed from the latest checkpoint."), MessageBar::Kind::Info);
            }
            Q_EMIT resumeDone(error);
        });
}

void MonitorPage::openStoreRun(qint64 runId)
{
    reset();
    m_attaching.clear();
    m_attachRetry->stop();
    m_storeRunId = runId;
    ++m_storeTicket; // updates for the run followed before are dropped
    m_where.clear();
    m_path->setText(tr("run %1").arg(runId));
    m_run.id = QString::number(runId);
    if (!m_store) {
        m_message->showMessage(
            tr("No run store is open, so run %1 cannot be followed.").arg(runId));
        return;
    }
    m_status->setText(tr("Connecting to run %1…").arg(runId));
    m_stop->setEnabled(true);
    m_store->followRun(runId, m_storeTicket);
    requestScalars();
}

void MonitorPage::onStoreState(const jobs::FollowUpdate::State& st)
{
    m_where = st.where;
    m_run.directory = st.where;
    if (m_path->text() != st.where)
        m_path->setText(st.where);
    m_storeResumable = st.resumable;
    if (!st.ended) {
        // The store is the truth: a run resumed in the same record is live again even though
        // the finish event of its previous process is in its history.
        if (m_finished) {
            m_finished = false;
            m_stop->setEnabled(true);
            m_resume->setEnabled(false);
            m_status->setText(runningLabel());
        }
        if (m_status->text().startsWith(tr("Connecting")))
            m_status->setText(runningLabel());
        return;
    }
    m_stop->setEnabled(false);
    m_resume->setEnabled(st.resumable && !m_awaitingResume);
    if (m_finished) {
        updateProgress();
        Q_EMIT resumeCheckDone(m_resume->isEnabled());
        return;
    }
    m_finished = true;
    updateProgress();
    if (m_finishReason) {
        // The run wrote why it ended.
        m_status->setText(
            tr("Finished%1").arg(m_finishReason->isEmpty() ? "" : ": " + *m_finishReason));
        Q_EMIT runFinished(*m_finishReason);
        Q_EMIT resumeCheckDone(m_resume->isEnabled());
        return;
    }
    // Ended without a finish event (killed, lost node, cancelled job): the store knows why.
    const QString reason = st.message.isEmpty() ? st.status : st.status + ": " + st.message;
    if (st.status == QLatin1String("interrupted")) {
        m_status->setText(tr("Interrupted"));
        m_message->showMessage(tr("The run ended early: %1.%2")
                                   .arg(st.message.isEmpty() ? st.status : st.message,
                                       st.resumable ? tr(" Resume continues it from its latest "
                                                         "complete checkpoint.")
                                                    : QString()),
            MessageBar::Kind::Error);
    } else {
        m_status->setText(tr("Ended (%1)").arg(reason));
        if (st.status != QLatin1String("finished"))
            m_message->showMessage(tr("The run ended early (%1).%2")
                                       .arg(reason,
                                           st.resumable ? tr(" Resume continues it from its "
                                                             "latest complete checkpoint.")
                                                        : QString()),
                MessageBar::Kind::Error);
    }
    Q_EMIT runFinished(st.status);
    Q_EMIT resumeCheckDone(m_resume->isEnabled());
}

void MonitorPage::setRunningRuns(const QVector<jobs::RunRecord>& runs)
{
    const qint64 current = m_running->currentData().toLongLong();
    QSignalBlocker block(m_running);
    m_running->clear();
    m_running->addItem(tr("%n run(s)", "", int(runs.size())), qint64(0));
    for (const auto& r : runs)
        m_running->addItem(
            tr("%1 (run %2, %3)").arg(r.name).arg(r.id).arg(jobs::toString(r.status)), r.id);
    const int again = m_running->findData(current);
    m_running->setCurrentIndex(again > 0 ? again : 0);
    m_running->setVisible(!runs.isEmpty());
    m_runningLabel->setVisible(!runs.isEmpty());
}

int MonitorPage::runningRunCount() const
{
    return std::max(0, m_running->count() - 1);
}

QString MonitorPage::etaText() const
{
    return m_eta->text();
}

QString MonitorPage::logText() const
{
    return m_log->toPlainText();
}

QString MonitorPage::messageText() const
{
    return m_message->text();
}

void MonitorPage::browse()
{
    const QString dir
        = QFileDialog::getExistingDirectory(this, tr("Open a run folder"), m_path->text());
    if (!dir.isEmpty())
        openRunDirectory(dir);
}

void MonitorPage::showNoRun()
{
    m_status->setText(tr("No run open"));
    m_loss->setEmptyText(
        tr("No run open.\nStart one on the Launch page,\nor open a run folder (Ctrl+O)."));
}

void MonitorPage::reset()
{
    m_loss->setEmptyText(tr("Waiting for the run's first step…"));
    m_run = jobs::RunSeries {};
    m_predictedBytes.reset();
    m_plannedByCategory.clear();
    m_plannedPeakPhase.clear();
    ++m_predictionGeneration;
    m_totalSteps = 0;
    m_finished = false;
    m_finishReason.reset();
    m_storeResumable = false;
    m_resume->setEnabled(false);
    m_scalarTag->clear();
    m_scalars->setPoints(0, {}, {});
    m_scalars->setTitle(QString());
    for (LivePlot* p : {m_loss, m_lr, m_gradNorm, m_throughput, m_margin, m_accuracy}) {
        for (int i = 0; i < p->seriesCount(); ++i)
            p->setPoints(i, {}, {});
        p->clearMarkers();
    }
    showPreferenceCharts(false);
    m_memory->setBars({});
    m_memory->setCapacity(std::nullopt);
    m_deviceMemory->clear();
    m_deviceMemory->hide();
    m_log->clear();
    m_shownLogRank = 0;
    while (m_logRank->count() > 1)
        m_logRank->removeItem(1);
    m_logRank->setCurrentIndex(0);
    m_events->clear();
    m_samples->clear();
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_progress->setFormat(QString());
    m_eta->clear();
    m_lastSave = {};
    m_checkpointCost->clear();
    m_message->clearMessage();
}

void MonitorPage::openRunDirectory(const QString& directory)
{
    // A folder is attached to the store (recorded and ingested when it is not yet), then
    // followed by its id like any other run.
    if (m_storeRunId != 0 && m_store)
        m_store->unfollow();
    reset();
    m_storeRunId = 0;
    ++m_storeTicket;
    m_where = directory;
    if (directory.isEmpty()) {
        showNoRun();
        m_message->showMessage(tr("Enter or choose a run folder first."));
        return;
    }
    m_path->setText(directory);
    m_run.directory = directory;
    if (!m_store) {
        m_message->showMessage(
            tr("No run store is open, so the folder %1 cannot be followed.").arg(directory));
        return;
    }
    m_status->setText(tr("Opening the run…"));
    m_attaching = directory;
    m_attachRetry->stop();
    m_store->attachRunDirectory(directory);
}

QString MonitorPage::runningLabel() const
{
    return m_run.name.isEmpty() ? tr("Running") : m_run.name;
}

void MonitorPage::onUpdate(const jobs::FollowUpdate& u)
{
    if (u.points.size() > 0)
        requestScalars();
    if (u.specChanged) {
        m_message->clearMessage();
        m_run.config = u.spec;
        m_run.name = QString::fromStdString(u.spec.value("name", std::string()));
        m_totalSteps = u.spec.value("steps", int64_t(0));
        const std::string objective = u.spec.value("objective", std::string("sft"));
        if (objective == "dpo" || objective == "orpo")
            showPreferenceCharts(true);
        if (m_predictor) {
            // The predictor may read a model folder: off the UI thread.
            const quint64 generation = ++m_predictionGeneration;
            runInBackground(
                this, [p = m_predictor, spec = u.spec] { return p(spec); },
                [this, generation](std::optional<plan::PlanResult> planned) {
                    if (generation != m_predictionGeneration)
                        return;
                    m_plannedByCategory.clear();
                    m_plannedPeakPhase.clear();
                    if (planned) {
                        for (int64_t b :
                            protocol::plannedByCategory(planned->perDevice.components()))
                            m_plannedByCategory.push_back(double(b));
                        m_plannedPeakPhase = QString::fromStdString(planned->peakPhase);
                        // The worker's own estimate (its start event), when it came, stays.
                        if (!m_predictedBytes)
                            m_predictedBytes = double(planned->perDevice.total());
                    }
                    updateMemory();
                });
        }
        if (!m_finished)
            m_status->setText(runningLabel());
    }
    const jobs::RunSeries& p = u.points;
    if (!p.step.isEmpty()) {
        m_run.append(p);
        QVector<double> evalStep, evalLoss;
        for (qsizetype i = 0; i < p.evalLoss.size(); ++i)
            if (!std::isnan(p.evalLoss[i])) {
                evalStep.append(p.step[i]);
                evalLoss.append(p.evalLoss[i]);
            }
        // One batched append per series per update, whatever the record rate.
        m_loss->appendPoints(0, p.step, p.loss);
        if (!evalStep.isEmpty())
            m_loss->appendPoints(1, evalStep, evalLoss);
        m_lr->appendPoints(0, p.step, p.lr);
        m_gradNorm->appendPoints(0, p.step, p.gradNorm);
        m_throughput->appendPoints(0, p.step, p.tokensPerSec);
        // A preference run's rewards (also in the Scalars tab under their tags).
        const auto scalar = [&p](const char* tag) { return p.scalars.value(QLatin1String(tag)); };
        const jobs::ScalarSeries margin = scalar("train/rewards/margins");
        const jobs::ScalarSeries accuracy = scalar("train/rewards/accuracies");
        const jobs::ScalarSeries evalAccuracy = scalar("eval/rewards/accuracies");
        if (!margin.step.isEmpty() || !accuracy.step.isEmpty())
            showPreferenceCharts(true);
        m_margin->appendPoints(0, margin.step, margin.value);
        m_accuracy->appendPoints(0, accuracy.step, accuracy.value);
        m_accuracy->appendPoints(1, evalAccuracy.step, evalAccuracy.value);
        updateMemory();
        updateProgress();
        Q_EMIT pointsArrived(pointCount());
    } else {
        m_run.events.insert(m_run.events.end(), p.events.begin(), p.events.end());
    }
    for (const auto& e : p.events) {
        auto* item = new QTreeWidgetItem(m_events,
            {formatDuration(e.wallTimeSec), e.step >= 0 ? QString::number(e.step) : QString(),
                QString::fromStdString(e.kind), QString::fromStdString(e.message)});
        if (e.kind == "error" || e.kind == "warning")
            item->setForeground(2, QColor(200, 40, 40));
        if (const auto sample = protocol::sampleFromEvent(e))
            new QTreeWidgetItem(m_samples,
                {QString::number(sample->step), QString::fromStdString(sample->prompt),
                    QString::fromStdString(sample->completion)});
        // What the latest process said when it ended; the store's status says that it has.
        if (e.kind == "start")
            m_finishReason.reset();
        // The worker's own planner estimate for the device and ranks it resolved: it replaces
        // the one made here from the spec (which a remote model folder may not allow).
        if (e.kind == "start" && e.data.contains("planned_peak_bytes")
            && e.data["planned_peak_bytes"].is_number()) {
            m_predictedBytes = e.data["planned_peak_bytes"].get<double>();
            updateMemory();
        }
        if (e.kind == "finish")
            m_finishReason = QString::fromStdString(e.data.value("reason", std::string()));
        if (e.kind == "checkpoint" && e.data.value("action", std::string()) == "save") {
            m_lastSave.step = e.step;
            m_lastSave.bytes = e.data.value("bytes", int64_t(0));
            m_lastSave.seconds = e.data.value("seconds", 0.0);
            updateCheckpointCost();
        }
        if (e.kind == "error") // the engine names its flags: said as the Launch page names them
            m_message->showMessage(
                tr("The run reported an error: %1")
                    .arg(jobs::inStudioWords(QString::fromStdString(e.message))));
        else if (e.kind == "restart") {
            // The launcher healed a dead or hung rank (--max-restarts): marked where it failed.
            item->setForeground(2, QColor(200, 110, 20));
            for (LivePlot* p : {m_loss, m_gradNorm})
                p->addMarker(double(e.step), tr("restart %1").arg(e.data.value("restart", 0)));
            m_message->showMessage(tr("The run restarted from its checkpoint at step %1: %2")
                                       .arg(e.data.value("checkpoint_step", int64_t(0)))
                                       .arg(QString::fromStdString(e.message)),
                MessageBar::Kind::Info);
        } else if (e.kind == "preempted" || e.kind == "requeued") {
            // Slurm's preemption signal (checkpoint, stop) and the job it brought back.
            const bool back = e.kind == "requeued";
            item->setForeground(2, QColor(200, 110, 20));
            for (LivePlot* p : {m_loss, m_gradNorm})
                p->addMarker(double(e.step), back ? tr("requeued") : tr("preempted"));
            m_message->showMessage(back
                    ? tr("The job came back and continues from its checkpoint: %1")
                          .arg(QString::fromStdString(e.message))
                    : tr("The run was preempted after step %1 and wrote a checkpoint; it "
                         "continues from it when started again (a Slurm job requeues itself).")
                          .arg(e.step),
                MessageBar::Kind::Info);
        } else if (e.kind == "data" && e.data.value("skipped_lines", int64_t(0)) > 0)
            m_message->showMessage(tr("The training data had bad lines that were skipped: %1")
                                       .arg(QString::fromStdString(e.message)),
                MessageBar::Kind::Info);
    }
    if (!u.logRanks.isEmpty()) {
        for (int r : u.logRanks)
            if (m_logRank->findData(r) < 0)
                m_logRank->addItem(tr("rank %1").arg(r), r);
    }
    if (u.logReset) {
        m_log->clear();
        m_shownLogRank = u.logRank;
        m_logLabel->setText(tr("Log of rank %1:").arg(u.logRank));
    }
    if (!u.logLines.isEmpty())
        m_log->appendPlainText(u.logLines.join('\n'));
}

void MonitorPage::updateProgress()
{
    if (m_run.size() == 0)
        return;
    updateCheckpointCost();
    const double step = m_run.step.back();
    m_progress->setFormat(tr("step %v of %m"));
    if (m_totalSteps > 0) {
        m_progress->setRange(0, int(m_totalSteps));
        m_progress->setValue(int(std::min<double>(step, double(m_totalSteps))));
    } else {
        m_progress->setRange(0, 0);
    }
    const qsizetype n = m_run.size();
    if (n >= 2 && m_totalSteps > 0 && !m_finished) {
        const double dt = m_run.wallTimeSec.back() - m_run.wallTimeSec.front();
        const double ds = m_run.step.back() - m_run.step.front();
        if (dt > 0 && ds > 0) {
            const double eta = (double(m_totalSteps) - step) * dt / ds;
            m_eta->setText(tr("elapsed %1 · ETA %2")
                               .arg(formatDuration(m_run.wallTimeSec.back()), formatDuration(eta)));
            return;
        }
    }
    m_eta->setText(tr("elapsed %1").arg(formatDuration(m_run.wallTimeSec.back())));
}

void MonitorPage::updateCheckpointCost()
{
    const int64_t every = m_run.config.is_object()
        ? m_run.config.value("checkpoint_every", int64_t(0))
        : int64_t(0);
    const int ranks = m_run.config.is_object() ? int(m_run.config.value("nodes", int64_t(1))
                          * m_run.config.value("procs_per_node", int64_t(1)))
                                               : 1;
    QStringList parts;
    if (m_lastSave.step >= 0) {
        QString size = formatBytes(double(m_lastSave.bytes));
        if (ranks > 1)
            size = tr("%1 (%2/rank)")
                       .arg(size, formatBytes(double(m_lastSave.bytes) / double(ranks)));
        parts << tr("checkpoint %1 in %2 s").arg(size).arg(m_lastSave.seconds, 0, 'f', 2);
    }
    // The training a failure loses at most: the steps between two checkpoints at the measured
    // pace (a checkpoint's own write time included).
    const qsizetype n = m_run.size();
    if (every > 0 && n >= 2) {
        const double dt = m_run.wallTimeSec.back() - m_run.wallTimeSec.front();
        const double ds = m_run.step.back() - m_run.step.front();
        if (dt > 0 && ds > 0)
            parts << tr("%1 at risk per %2 steps")
                         .arg(formatDuration(double(every) * dt / ds))
                         .arg(every);
    } else if (every == 0 && m_run.config.is_object() && n >= 1 && m_lastSave.step < 0) {
        parts << tr("no periodic checkpoints");
    }
    m_checkpointCost->setText(parts.join(QStringLiteral(" · ")));
}

QString MonitorPage::checkpointText() const
{
    return m_checkpointCost->text();
}

void MonitorPage::updateMemory()
{
    std::vector<MemoryBar> bars;
    // A GPU run: the caching allocator's reserved bytes (what nvidia-smi shows and what runs
    // out), its retries (it freed its cache to fit an allocation: fragmentation) and OOMs.
    const protocol::RankMemory* mostReserved = nullptr;
    int64_t retries = 0;
    int64_t ooms = 0;
    // Tensor and pipeline parallel: consecutive ranks split each block and the stages hold
    // consecutive groups of ranks (docs/ARCHITECTURE.md, "Placement"), so each bar says which
    // stage, data-parallel copy and TP rank it is.
    const int tp
        = std::max(1, m_run.config.is_object() ? m_run.config.value("tensor_parallel", 1) : 1);
    const int pp
        = std::max(1, m_run.config.is_object() ? m_run.config.value("pipeline_parallel", 1) : 1);
    const int world = static_cast<int>(m_run.lastMemory.size());
    const int perStage = pp > 1 && world % pp == 0 ? world / pp : world;
    for (const auto& m : m_run.lastMemory) {
        MemoryBar bar;
        bar.label = tr("rank %1").arg(m.rank);
        if ((tp > 1 || pp > 1) && perStage > 0) {
            // Under the rank, its coordinates in torchtitan's names (pp, dp, tp), short enough
            // for several bars side by side.
            const int within = m.rank % perStage;
            QStringList at;
            if (pp > 1)
                at << QStringLiteral("pp%1").arg(m.rank / perStage);
            at << QStringLiteral("dp%1").arg(within / tp);
            if (tp > 1)
                at << QStringLiteral("tp%1").arg(within % tp);
            bar.label += QLatin1Char('\n') + at.join(QLatin1Char(' '));
        }
        bar.bytes = memoryByCategory(m);
        bar.predictedBytes = m_predictedBytes;
        if (m.peakBytes > 0)
            bar.measuredPeakBytes = double(m.peakBytes);
        // Planned at the peak against measured at the step's end: what lives only inside a
        // step is freed by the record.
        bar.plannedBytes = m_plannedByCategory;
        if (!m_plannedByCategory.empty()) {
            using Measured = protocol::MemoryCategory::Measured;
            auto labels = [](Measured kind) {
                QStringList out;
                for (const protocol::MemoryCategory& c : protocol::memoryCategories())
                    if (c.measured == kind)
                        out << QCoreApplication::translate(
                            "shard::protocol::MemoryCategory", c.label);
                return out.join(tr(", "));
            };
            bar.notes << tr("planned: at the peak of a step%1; measured: at the step's end, "
                            "where %2 are freed (%3: the largest forward's; %4: the rest the "
                            "allocator holds)")
                             .arg(m_plannedPeakPhase.isEmpty()
                                     ? QString()
                                     : tr(" (%1)").arg(m_plannedPeakPhase),
                                 labels(Measured::Freed), labels(Measured::Largest),
                                 labels(Measured::Rest));
        }
        if (m.offloadedBytes > 0)
            bar.notes << tr("offloaded to host memory: %1 (masters, gradients, AdamW state)")
                             .arg(formatBytes(double(m.offloadedBytes)));
        if (m.cuda) {
            bar.notes << tr("GPU reserved: %1 (peak %2)")
                             .arg(formatBytes(double(m.cudaReservedBytes)),
                                 formatBytes(double(m.cudaReservedPeakBytes)))
                      << tr("GPU allocated: %1 (peak %2)")
                             .arg(formatBytes(double(m.cudaAllocatedBytes)),
                                 formatBytes(double(m.cudaAllocatedPeakBytes)))
                      << tr("alloc retries: %1, OOMs: %2").arg(m.cudaAllocRetries).arg(m.cudaOoms);
            if (!mostReserved || m.cudaReservedPeakBytes > mostReserved->cudaReservedPeakBytes)
                mostReserved = &m;
            retries += m.cudaAllocRetries;
            ooms += m.cudaOoms;
        }
        bars.push_back(std::move(bar));
    }
    m_memory->setBars(bars);
    if (!mostReserved) {
        m_deviceMemory->hide();
        return;
    }
    QString text = tr("GPU max reserved %1 (rank %2) · alloc retries %3 · OOMs %4")
                       .arg(formatBytes(double(mostReserved->cudaReservedPeakBytes)))
                       .arg(mostReserved->rank)
                       .arg(retries)
                       .arg(ooms);
    if (retries > 0)
        text += tr(" — the caching allocator had to free its cache to fit: memory is "
                   "fragmented or nearly full (a smaller micro-batch or checkpointing helps)");
    m_deviceMemory->setText(text);
    m_deviceMemory->setToolTip(
        tr("From the CUDA caching allocator of each rank, since the previous record: reserved "
           "is what the GPU holds for this process, allocated what tensors use."));
    m_deviceMemory->show();
}

QString MonitorPage::deviceMemoryText() const
{
    return m_deviceMemory->isHidden() ? QString() : m_deviceMemory->text();
}

void MonitorPage::stopRun()
{
    if (m_storeRunId == 0 || !m_store)
        return;
    m_store->stopRun(m_storeRunId);
    m_message->showMessage(
        tr("Stop requested; the run records why it ended."), MessageBar::Kind::Info);
}

bool MonitorPage::canResume() const
{
    return m_resume->isEnabled();
}

void MonitorPage::resumeRun()
{
    if (m_storeRunId == 0 || !m_store || !m_resume->isEnabled())
        return;
    m_resume->setEnabled(false);
    m_awaitingResume = true;
    m_message->showMessage(tr("Resuming from the latest checkpoint…"), MessageBar::Kind::Info);
    m_store->resumeRun(m_storeRunId);
}

void MonitorPage::showPreferenceCharts(bool on)
{
    m_margin->setVisible(on);
    m_accuracy->setVisible(on);
}

void MonitorPage::flushCharts()
{
    for (LivePlot* p : {m_loss, m_lr, m_gradNorm, m_throughput, m_margin, m_accuracy})
        p->flushNow();
    m_memory->flushNow();
}

void MonitorPage::restyle()
{
    for (LivePlot* p : {m_loss, m_lr, m_gradNorm, m_throughput, m_margin, m_accuracy})
        p->restyle();
    m_memory->restyle();
}

} // namespace shard::widgets
