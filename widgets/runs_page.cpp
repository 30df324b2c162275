// RunsPage: RunTableModel behind a QSortFilterProxyModel, fed by jobs::RunService.
#include "widgets/runs_page.h"

#include <algorithm>

#include <QButtonGroup>
#include <QCheckBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelection>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QRadioButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include "jobs/run_service.h"
#include "widgets/export_dialog.h"
#include "widgets/import_dialog.h"
#include "widgets/message_bar.h"
#include "widgets/run_table_model.h"

namespace shard::widgets {

RunsPage::RunsPage(QWidget* parent)
    : QWidget(parent)
{
    m_model = new RunTableModel(this);
    m_proxy = new QSortFilterProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(RunTableModel::kSortRole);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_proxy->setFilterKeyColumn(-1);
    m_view = new QTableView(this);
    m_view->setModel(m_proxy);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(RunTableModel::Started, Qt::DescendingOrder);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_view->setAlternatingRowColors(true);
    m_view->verticalHeader()->setVisible(false);
    m_view->verticalHeader()->setDefaultSectionSize(m_view->fontMetrics().height() + 8);
    m_view->horizontalHeader()->setStretchLastSection(true);
    m_view->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    // Columns are fitted to the first 200 rows (Qt's default reads 1,000 on every refresh, most
    // of a refresh's time on the UI thread with 1,000 runs: bench_runs_page).
    m_view->horizontalHeader()->setResizeContentsPrecision(200);
    m_view->setAccessibleName(tr("Recorded runs"));
    m_filter = new QLineEdit(this);
    m_filter->setPlaceholderText(tr("Filter by name, model, strategy, status…"));
    m_filter->setClearButtonEnabled(true);
    m_refresh = new QPushButton(tr("&Refresh"), this);
    m_monitor = new QPushButton(tr("&Monitor"), this);
    m_compare = new QPushButton(tr("&Compare selected"), this);
    m_import = new QPushButton(tr("&Import logs…"), this);
    m_import->setToolTip(tr("Another tool's logs, here or on a host: TensorBoard event files "
                            "(Hugging Face Trainer, torchtitan, DeepSpeed, Megatron-LM, "
                            "Lightning), a trainer_state.json or a job's stdout, optionally "
                            "followed with their Slurm job; or a run folder of Shard Studio"));
    m_rename = new QPushButton(tr("Re&name…"), this);
    m_notes = new QPushButton(tr("N&otes…"), this);
    m_continue = new QPushButton(tr("Con&tinue…"), this);
    m_continue->setToolTip(tr("Train the selected run for more steps from its latest checkpoint"));
    m_exportModel = new QPushButton(tr("E&xport model…"), this);
    m_exportModel->setObjectName("exportModel");
    m_exportModel->setToolTip(tr("Save the selected run's model as a GGUF file (llama.cpp, "
                                 "Ollama, LM Studio) or a Hugging Face folder"));
    m_delete = new QPushButton(tr("&Delete…"), this);
    m_message = new MessageBar(this);

    auto* bar = new QHBoxLayout;
    auto* filterLabel = new QLabel(tr("&Filter"), this);
    filterLabel->setBuddy(m_filter);
    bar->addWidget(filterLabel);
    bar->addWidget(m_filter, 1);
    bar->addWidget(m_refresh);
    bar->addWidget(m_import);
    bar->addWidget(m_monitor);
    bar->addWidget(m_compare);
    auto* actions = new QHBoxLayout;
    actions->addStretch(1);
    actions->addWidget(m_rename);
    actions->addWidget(m_notes);
    actions->addWidget(m_continue);
    actions->addWidget(m_exportModel);
    actions->addWidget(m_delete);
    m_emptyHint = new QLabel(this);
    m_emptyHint->setObjectName("emptyHint");
    m_emptyHint->setWordWrap(true);
    m_emptyHint->hide();

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(m_message);
    layout->addWidget(m_emptyHint);
    layout->addWidget(m_view, 1);
    layout->addLayout(actions);

    setTabOrder(m_filter, m_refresh);
    setTabOrder(m_refresh, m_import);
    setTabOrder(m_import, m_monitor);
    setTabOrder(m_monitor, m_compare);
    setTabOrder(m_compare, m_view);
    setTabOrder(m_view, m_rename);
    setTabOrder(m_rename, m_notes);
    setTabOrder(m_notes, m_continue);
    setTabOrder(m_continue, m_exportModel);
    setTabOrder(m_exportModel, m_delete);

    connect(m_filter, &QLineEdit::textChanged, this, &RunsPage::setFilterText);
    connect(m_refresh, &QPushButton::clicked, this, &RunsPage::refresh);
    connect(m_compare, &QPushButton::clicked, this, [this] {
        const auto ids = selectedRunIds();
        if (ids.size() < 1) {
            m_message->showMessage(
                tr("Select one or more runs to compare."), MessageBar::Kind::Info);
            return;
        }
        Q_EMIT compareRequested(ids);
    });
    auto monitorCurrent = [this] {
        const QModelIndex i = m_proxy->mapToSource(m_view->currentIndex());
        if (const jobs::RunRecord* r = m_model->runAt(i.row()))
            Q_EMIT monitorRequested(QString::number(r->id));
        else
            m_message->showMessage(tr("Select a run to monitor."), MessageBar::Kind::Info);
    };
    connect(m_monitor, &QPushButton::clicked, this, monitorCurrent);
    connect(m_view, &QTableView::activated, this, monitorCurrent);
    connect(m_rename, &QPushButton::clicked, this, [this] {
        const jobs::RunRecord* r = currentRun();
        if (!r)
            return;
        bool ok = false;
        const QString name = QInputDialog::getText(
            this, tr("Rename run %1").arg(r->id), tr("Name"), QLineEdit::Normal, r->name, &ok);
        if (ok)
            renameRun(r->id, name);
    });
    connect(m_notes, &QPushButton::clicked, this, [this] {
        const jobs::RunRecord* r = currentRun();
        if (!r)
            return;
        bool ok = false;
        const QString notes = QInputDialog::getMultiLineText(
            this, tr("Notes on run %1").arg(r->id), tr("Notes"), r->notes, &ok);
        if (ok)
            setNotes(r->id, notes);
    });
    connect(m_continue, &QPushButton::clicked, this, [this] {
        const jobs::RunRecord* r = currentRun();
        if (!r)
            return;
        QDialog* dialog = continueDialog(r->id);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->open();
    });
    connect(m_exportModel, &QPushButton::clicked, this, [this] {
        const jobs::RunRecord* r = currentRun();
        if (!r) {
            m_message->showMessage(tr("Select the run to export."), MessageBar::Kind::Info);
            return;
        }
        if (r->target != jobs::TargetKind::Local || !QDir(r->runDir).exists()) {
            m_message->showMessage(tr("Run %1's folder is not on this machine: export it where "
                                      "it ran (shard-worker export --format gguf --checkpoint %2 "
                                      "--out NAME.gguf).")
                                       .arg(r->id)
                                       .arg(r->runDir),
                MessageBar::Kind::Info);
            return;
        }
        auto* dialog = new ExportDialog(r->runDir, r->name, this);
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->open();
    });
    connect(m_delete, &QPushButton::clicked, this, [this] {
        const auto ids = selectedRunIds();
        if (ids.isEmpty()) {
            m_message->showMessage(tr("Select the runs to delete."), MessageBar::Kind::Info);
            return;
        }
        QMessageBox box(QMessageBox::Warning, tr("Delete runs"), deleteQuestion(ids),
            QMessageBox::Cancel, this);
        box.setObjectName("deleteConfirmation");
        auto* folders
            = new QCheckBox(ids.size() == 1 ? tr("Also delete its folder on this machine")
                                            : tr("Also delete their folders on this machine"),
                &box);
        box.setCheckBox(folders);
        QPushButton* yes = box.addButton(tr("Delete"), QMessageBox::DestructiveRole);
        box.exec();
        if (box.clickedButton() == yes)
            deleteRuns(ids, folders->isChecked());
    });
    connect(m_import, &QPushButton::clicked, this, [this] { importDialog()->open(); });
}

QDialog* RunsPage::importDialog()
{
    auto* dialog = new ImportDialog(m_hosts, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this,
        [this, dialog] { importLogs(dialog->importPath(), dialog->slurmJob()); });
    return dialog;
}

void RunsPage::importLogs(const QString& path, const QString& slurmJob)
{
    if (!m_store)
        return;
    m_importing = path;
    m_message->showMessage(tr("Importing %1…").arg(path), MessageBar::Kind::Info);
    m_store->importLogs(path, slurmJob);
}

namespace {

// What Continue needs of a run's spec: its schedule (the run spec's defaults where unset).
struct ScheduleOf {
    std::string kind = "cosine";
    double lr = 1e-3;
    double minLrRatio = 0.0;
    int64_t warmup = 0;
    int64_t scheduleSteps = 0;
    bool decays() const { return kind != "constant"; }
    double endLr() const { return lr * minLrRatio; }
};

ScheduleOf scheduleOf(const jobs::RunRecord& run)
{
    ScheduleOf s;
    const auto spec = nlohmann::json::parse(run.specJson.toStdString(), nullptr, false);
    if (!spec.is_object())
        return s;
    auto get = [&spec](const char* key, auto fallback) {
        const auto it = spec.find(key);
        if (it == spec.end() || it->is_null())
            return fallback;
        try {
            return it->template get<decltype(fallback)>();
        } catch (const nlohmann::json::exception&) {
            return fallback;
        }
    };
    s.kind = get("schedule", s.kind);
    s.lr = get("lr", s.lr);
    s.minLrRatio = get("min_lr_ratio", s.minLrRatio);
    s.warmup = get("warmup", s.warmup);
    s.scheduleSteps = get("schedule_steps", s.scheduleSteps);
    return s;
}

} // namespace

QString RunsPage::continueQuestion(qint64 runId) const
{
    QString text = tr("Train run %1 this many more steps from its latest checkpoint:").arg(runId);
    const jobs::RunRecord* run = nullptr;
    for (int r = 0; r < m_model->rowCount() && !run; ++r)
        if (m_model->runAt(r)->id == runId)
            run = m_model->runAt(r);
    if (!run)
        return text;
    const ScheduleOf schedule = scheduleOf(*run);
    if (!schedule.decays())
        return text;
    // A decaying schedule has ended at the checkpoint: say what each choice does to it.
    return text + "\n\n"
        + tr("Its %1 learning-rate schedule decayed over %2 steps to %3. After the checkpoint "
             "the learning rate can:")
              .arg(QString::fromStdString(schedule.kind))
              .arg(schedule.scheduleSteps > 0 ? schedule.scheduleSteps : run->totalSteps)
              .arg(schedule.endLr(), 0, 'g', 3);
}

QDialog* RunsPage::continueDialog(qint64 runId)
{
    auto* dialog = new QDialog(this);
    dialog->setObjectName("continueDialog");
    dialog->setWindowTitle(tr("Continue run %1").arg(runId));
    auto* layout = new QVBoxLayout(dialog);
    auto* question = new QLabel(continueQuestion(runId), dialog);
    question->setWordWrap(true);
    layout->addWidget(question);
    auto* steps = new QSpinBox(dialog);
    steps->setObjectName("moreSteps");
    steps->setRange(1, 100000000);
    steps->setValue(100);
    question->setBuddy(steps);
    layout->addWidget(steps);

    const jobs::RunRecord* run = nullptr;
    for (int r = 0; r < m_model->rowCount() && !run; ++r)
        if (m_model->runAt(r)->id == runId)
            run = m_model->runAt(r);
    const ScheduleOf schedule = run ? scheduleOf(*run) : ScheduleOf {};
    auto* choices = new QButtonGroup(dialog);
    if (run && schedule.decays()) {
        // Each choice is a run-spec setting the engine trains with (schedule_steps,
        // schedule_start), set by Launcher::resume.
        auto* stretch = new QRadioButton(
            tr("&Stretch the schedule to the new length: it rises again and decays over the "
               "longer run (warm-up is not repeated)"),
            dialog);
        stretch->setObjectName("scheduleStretch");
        auto* keep
            = new QRadioButton(tr("&Keep the finished schedule: constant at its end value (%1)")
                                   .arg(schedule.endLr(), 0, 'g', 3),
                dialog);
        keep->setObjectName("scheduleKeep");
        if (schedule.endLr() <= 0) {
            keep->setEnabled(false);
            keep->setToolTip(tr("Its end value is 0: the run would not learn"));
        }
        auto* restart = new QRadioButton(schedule.warmup > 0
                ? tr("&Restart warm-up (%1 steps) and decay over the new steps")
                      .arg(schedule.warmup)
                : tr("&Restart the decay from the full learning rate over the new steps"),
            dialog);
        restart->setObjectName("scheduleRestart");
        choices->addButton(stretch, int(jobs::ContinueSchedule::Stretch));
        choices->addButton(keep, int(jobs::ContinueSchedule::Keep));
        choices->addButton(restart, int(jobs::ContinueSchedule::Restart));
        for (QAbstractButton* b : choices->buttons()) {
            qobject_cast<QRadioButton*>(b)->setAutoExclusive(true);
            layout->addWidget(b);
        }
        stretch->setChecked(true);
    }
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, dialog);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Continue"));
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::reject);
    connect(dialog, &QDialog::accepted, this, [this, runId, steps, choices] {
        const int chosen = choices->checkedId();
        continueRun(runId, steps->value(),
            chosen < 0 ? jobs::ContinueSchedule::Stretch : jobs::ContinueSchedule(chosen));
    });
    return dialog;
}

QString RunsPage::deleteQuestion(const QVector<qint64>& runIds) const
{
    // Each run by id, name, status and folder: the one the user meant is recognisable, and a
    // wrong selection is caught before anything goes.
    auto describe = [this](qint64 id) {
        for (int r = 0; r < m_model->rowCount(); ++r)
            if (const jobs::RunRecord* run = m_model->runAt(r); run && run->id == id)
                return tr("run %1 “%2” (%3%4)")
                    .arg(id)
                    .arg(run->name, jobs::toString(run->status),
                        run->runDir.isEmpty() ? QString() : tr(", %1").arg(run->runDir));
        return tr("run %1").arg(id);
    };
    if (runIds.size() == 1)
        return tr("Delete %1 from the run store? Its points and events go with it.")
            .arg(describe(runIds.front()));
    constexpr int kListed = 10;
    QStringList lines;
    for (int i = 0; i < runIds.size() && i < kListed; ++i)
        lines << QStringLiteral("• ") + describe(runIds[i]);
    if (runIds.size() > kListed)
        lines << tr("… and %n more", "", int(runIds.size()) - kListed);
    return tr("Delete these %n runs from the run store? Their points and events go with them.", "",
               int(runIds.size()))
        + "\n\n" + lines.join('\n');
}

void RunsPage::setStore(jobs::RunService* store)
{
    m_store = store;
    connect(
        store, &jobs::RunService::runsListed, this, [this](const QVector<jobs::RunRecord>& runs) {
            // The rows are replaced: the selection and the current row follow their runs.
            const QVector<qint64> selected = selectedRunIds();
            const QModelIndex current = m_proxy->mapToSource(m_view->currentIndex());
            const qint64 currentId
                = m_model->runAt(current.row()) ? m_model->runAt(current.row())->id : 0;
            m_model->setRuns(runs);
            restoreSelection(selected, currentId);
            fitColumns();
            updateEmptyHint();
            clearStaleMessage(runs);
            Q_EMIT refreshed(int(runs.size()));
        });
    connect(store, &jobs::RunService::runDeleted, this, [this](qint64 id, const QString& note) {
        m_message->showMessage(tr("Deleted run %1.%2").arg(id).arg(note), MessageBar::Kind::Info);
        refresh();
    });
    connect(
        store, &jobs::RunService::resumed, this, [this](qint64 from, qint64 to, const QString& e) {
            if (!m_continuing.remove(from))
                return;
            if (!e.isEmpty()) {
                m_message->showMessage(tr("Run %1 cannot be continued: %2").arg(from).arg(e));
                return;
            }
            m_message->showMessage(
                tr("Run %1 continues from its latest checkpoint.").arg(to), MessageBar::Kind::Info);
            m_continued = {to, m_message->text(), false};
            refresh();
            Q_EMIT monitorRequested(QString::number(to));
        });
    connect(store, &jobs::RunService::opened, this, [this](const QString&, bool, const QString& w) {
        if (!w.isEmpty())
            m_message->showMessage(w, MessageBar::Kind::Info);
        refresh();
    });
    connect(store, &jobs::RunService::openFailed, this,
        [this](const QString& message) { m_message->showMessage(message); });
    // A folder imported here (or opened on the Monitor page) is now a recorded run.
    connect(store, &jobs::RunService::runAttached, this,
        [this](const QString& path, qint64 id, const QString& error) {
            const bool mine = !m_importing.isEmpty() && path == m_importing;
            if (mine)
                m_importing.clear();
            if (id == 0 && (isVisible() || mine))
                m_message->showMessage(error);
            else if (mine)
                m_message->showMessage(
                    tr("Imported %1: run %2.").arg(path).arg(id), MessageBar::Kind::Info);
            refresh();
        });
    connect(store, &jobs::RunService::errorOccurred, this, [this](const QString& message) {
        if (isVisible())
            m_message->showMessage(message);
    });
    // Live runs change their summary as they train: refresh at most every two seconds.
    auto* coalesce = new QTimer(this);
    coalesce->setSingleShot(true);
    coalesce->setInterval(2000);
    connect(coalesce, &QTimer::timeout, this, &RunsPage::refresh);
    connect(store, &jobs::RunService::runChanged, this, [this, coalesce](qint64 id) {
        // The user's own rename or notes show at once; a training run's changes wait.
        if (m_edited.remove(id)) {
            refresh();
            return;
        }
        if (!coalesce->isActive())
            coalesce->start();
    });
    // Runs another process recorded or changed (`shard run`, another studio).
    connect(store, &jobs::RunService::storeChanged, coalesce, [coalesce] {
        if (!coalesce->isActive())
            coalesce->start();
    });
    connect(store, &jobs::RunService::launched, this, &RunsPage::refresh);
}

const jobs::RunRecord* RunsPage::currentRun() const
{
    const jobs::RunRecord* r = m_model->runAt(m_proxy->mapToSource(m_view->currentIndex()).row());
    if (!r)
        m_message->showMessage(tr("Select a run first."), MessageBar::Kind::Info);
    return r;
}

void RunsPage::fitColumns()
{
    m_view->resizeColumnsToContents();
    // Free text must not push the numbers off the screen: hover shows it whole.
    for (int c :
        {RunTableModel::Name, RunTableModel::Model, RunTableModel::Message, RunTableModel::Notes})
        m_view->setColumnWidth(c, std::clamp(m_view->columnWidth(c), 80, 280));
}

void RunsPage::renameRun(qint64 runId, const QString& name)
{
    if (name.trimmed().isEmpty()) {
        m_message->showMessage(tr("A run needs a name."));
        return;
    }
    // The store refuses a name another run has; the rows shown say so at once.
    for (int r = 0; r < m_model->rowCount(); ++r)
        if (const jobs::RunRecord* run = m_model->runAt(r);
            run && run->id != runId && run->name == name.trimmed()) {
            m_message->showMessage(tr("Run %1 is already called “%2”: choose another name.")
                                       .arg(run->id)
                                       .arg(run->name));
            return;
        }
    if (m_store) {
        m_edited.insert(runId);
        m_store->renameRun(runId, name);
    }
}

void RunsPage::setNotes(qint64 runId, const QString& notes)
{
    if (m_store) {
        m_edited.insert(runId);
        m_store->setNotes(runId, notes);
    }
}

void RunsPage::restoreSelection(const QVector<qint64>& selected, qint64 currentId)
{
    if (selected.isEmpty() && currentId == 0)
        return;
    QItemSelection rows;
    QModelIndex current;
    for (int r = 0; r < m_proxy->rowCount(); ++r) {
        const QModelIndex i = m_proxy->index(r, 0);
        const qint64 id = m_proxy->data(i, RunTableModel::kIdRole).toLongLong();
        if (selected.contains(id))
            rows.select(i, m_proxy->index(r, m_proxy->columnCount() - 1));
        if (id == currentId)
            current = i;
    }
    if (current.isValid())
        m_view->selectionModel()->setCurrentIndex(current, QItemSelectionModel::NoUpdate);
    m_view->selectionModel()->select(rows, QItemSelectionModel::ClearAndSelect);
}

void RunsPage::clearStaleMessage(const QVector<jobs::RunRecord>& runs)
{
    // "Run N continues…" is true while it does: once the run has ended again, or is gone, the
    // message goes.
    if (m_continued.runId == 0)
        return;
    const auto it = std::find_if(runs.begin(), runs.end(),
        [&](const jobs::RunRecord& r) { return r.id == m_continued.runId; });
    const bool live = it != runs.end() && !jobs::isTerminal(it->status);
    m_continued.seenLive = m_continued.seenLive || live;
    if (live || (it != runs.end() && !m_continued.seenLive))
        return;
    if (m_message->text() == m_continued.text)
        m_message->clearMessage();
    m_continued = {};
}

void RunsPage::deleteRuns(const QVector<qint64>& runIds, bool removeFolders)
{
    if (m_store)
        for (qint64 id : runIds)
            m_store->deleteRun(id, removeFolders);
}

void RunsPage::continueRun(qint64 runId, qint64 moreSteps, jobs::ContinueSchedule schedule)
{
    if (!m_store)
        return;
    m_continuing.insert(runId);
    m_message->showMessage(tr("Continuing run %1 for %2 more steps…").arg(runId).arg(moreSteps),
        MessageBar::Kind::Info);
    m_store->continueRun(runId, moreSteps, schedule);
}

void RunsPage::refresh()
{
    if (m_store)
        m_store->listRuns();
}

void RunsPage::setFilterText(const QString& text)
{
    if (m_filter->text() != text)
        m_filter->setText(text);
    m_proxy->setFilterFixedString(text);
    updateEmptyHint();
}

void RunsPage::updateEmptyHint()
{
    // An empty table says where runs come from, or that the filter hides them.
    if (m_model->rowCount() == 0)
        m_emptyHint->setText(tr("No runs recorded yet. Start one on the Launch page (Ctrl+2) or "
                                "with `shard run` in a terminal, or import a run folder."));
    else if (m_proxy->rowCount() == 0)
        m_emptyHint->setText(tr("No run matches “%1”.").arg(m_filter->text()));
    m_emptyHint->setVisible(m_proxy->rowCount() == 0);
}

QVector<qint64> RunsPage::selectedRunIds() const
{
    QVector<qint64> ids;
    for (const QModelIndex& i : m_view->selectionModel()->selectedRows())
        ids.append(m_proxy->data(i, RunTableModel::kIdRole).toLongLong());
    return ids;
}

void RunsPage::selectRows(const QList<int>& rows)
{
    m_view->clearSelection();
    for (int r : rows)
        m_view->selectionModel()->select(
            m_proxy->index(r, 0), QItemSelectionModel::Select | QItemSelectionModel::Rows);
}

int RunsPage::visibleRowCount() const
{
    return m_proxy->rowCount();
}

QString RunsPage::messageText() const
{
    return m_message->text();
}

} // namespace shard::widgets
