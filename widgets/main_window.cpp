// MainWindow: navigation, menus, settings, and the wiring between pages and the store.
#include "widgets/main_window.h"

#include <QAbstractTextDocumentLayout>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollBar>
#include <QSettings>
#include <QShortcut>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextCursor>
#include <QVBoxLayout>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "shard/version.h"
#include "widgets/compare_page.h"
#include "widgets/hosts_page.h"
#include "widgets/launch_page.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/monitor_page.h"
#include "widgets/plan_page.h"
#include "widgets/playground_page.h"
#include "widgets/runs_page.h"

namespace shard::widgets {

QString pageName(Page page)
{
    switch (page) {
    case Page::Plan:
        return "plan";
    case Page::Launch:
        return "launch";
    case Page::Monitor:
        return "monitor";
    case Page::Runs:
        return "runs";
    case Page::Compare:
        return "compare";
    case Page::Hosts:
        return "hosts";
    case Page::Playground:
        return "playground";
    }
    return {};
}

std::optional<Page> pageFromName(const QString& name)
{
    for (int i = 0; i < kPageCount; ++i)
        if (pageName(Page(i)) == name.toLower())
            return Page(i);
    return std::nullopt;
}

MainWindow::MainWindow(const QString& storePath, QWidget* parent)
    : QMainWindow(parent)
{
    setWindowTitle(tr("Shard Studio"));
    m_nav = new QListWidget(this);
    m_nav->setObjectName("navigation");
    m_nav->setAccessibleName(tr("Pages"));
    m_nav->setFixedWidth(150);
    m_nav->setSpacing(2);
    m_stack = new QStackedWidget(this);

    m_plan = new PlanPage(this);
    m_launch = new LaunchPage(this);
    m_monitor = new MonitorPage(this);
    m_runs = new RunsPage(this);
    m_compare = new ComparePage(this);
    m_hosts = new HostsPage(this);
    m_playground = new PlaygroundPage(this);
    const QStringList titles = {tr("Plan"), tr("Launch"), tr("Monitor"), tr("Runs"), tr("Compare"),
        tr("Hosts"), tr("Playground")};
    const QList<QWidget*> pages
        = {m_plan, m_launch, m_monitor, m_runs, m_compare, m_hosts, m_playground};
    for (int i = 0; i < kPageCount; ++i) {
        auto* item = new QListWidgetItem(QString("%1   Ctrl+%2").arg(titles[i]).arg(i + 1), m_nav);
        item->setData(Qt::AccessibleTextRole, titles[i]);
        item->setSizeHint(QSize(140, 34));
        m_stack->addWidget(pages[i]);
        pages[i]->setObjectName(pageName(Page(i)) + "Page");
    }
    auto* central = new QWidget(this);
    auto* layout = new QHBoxLayout(central);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_nav);
    layout->addWidget(m_stack, 1);
    setCentralWidget(central);
    connect(m_nav, &QListWidget::currentRowChanged, m_stack, &QStackedWidget::setCurrentIndex);
    m_nav->setCurrentRow(0);

    m_store = new jobs::RunService(
        storePath.isEmpty() ? jobs::RunStore::defaultPath() : storePath, this);
    buildMenus();
    wirePages();
    statusBar()->showMessage(tr("Run store: %1").arg(m_store->path()));
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("&Open run folder…"));
    open->setShortcut(QKeySequence::Open);
    connect(open, &QAction::triggered, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a run folder"));
        if (!dir.isEmpty())
            monitorRun(dir);
    });
    QAction* import = file->addAction(tr("&Import logs…"));
    import->setToolTip(tr("Another tool's logs, here or on a host of the Hosts page"));
    connect(import, &QAction::triggered, this, [this] {
        showPage(Page::Runs);
        m_runs->importDialog()->open();
    });
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"));
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    for (int i = 0; i < kPageCount; ++i) {
        QAction* a = view->addAction(m_nav->item(i)->data(Qt::AccessibleTextRole).toString());
        a->setShortcut(QKeySequence(Qt::CTRL | Qt::Key(Qt::Key_1 + i)));
        connect(a, &QAction::triggered, this, [this, i] { showPage(Page(i)); });
    }
    view->addSeparator();
    QAction* dark = view->addAction(tr("&Dark theme"));
    dark->setCheckable(true);
    dark->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_D));
    connect(dark, &QAction::toggled, this,
        [this](bool on) { setTheme(on ? ThemeKind::Dark : ThemeKind::Light); });
    dark->setObjectName("darkThemeAction");

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    QAction* usage = help->addAction(tr("&Usage guide"));
    usage->setShortcut(QKeySequence::HelpContents);
    connect(usage, &QAction::triggered, this, &MainWindow::showUsageGuide);
    QAction* keys = help->addAction(tr("&Keyboard shortcuts"));
    keys->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Slash));
    connect(keys, &QAction::triggered, this, [this] {
        QMessageBox box(this);
        box.setWindowTitle(tr("Keyboard shortcuts"));
        box.setTextFormat(Qt::RichText);
        box.setText(shortcutsText());
        box.exec();
    });
    help->addSeparator();
    QAction* about = help->addAction(tr("&About Shard Studio"));
    connect(about, &QAction::triggered, this, [this] {
        QMessageBox::about(this, tr("About Shard Studio"),
            tr("<b>Shard Studio %1</b><br>Plan, launch, monitor and compare sharded "
               "fine-tuning runs.<br>Run store: %2")
                .arg(SHARD_VERSION, m_store->path().toHtmlEscaped()));
    });
}

QString MainWindow::shortcutsText() const
{
    QStringList rows;
    for (QMenu* menu : menuBar()->findChildren<QMenu*>()) {
        for (QAction* a : menu->actions()) {
            if (a->shortcut().isEmpty())
                continue;
            rows << QString("<tr><td><b>%1</b></td><td>%2</td></tr>")
                        .arg(a->shortcut().toString(QKeySequence::NativeText).toHtmlEscaped(),
                            a->text().remove('&').toHtmlEscaped());
        }
    }
    // Inside pages: the underlined letter of a field's label moves to it with Alt.
    rows << tr("<tr><td><b>Alt+letter</b></td><td>the field whose label has that letter "
               "underlined</td></tr>");
    return "<table cellspacing=6>" + rows.join("") + "</table>";
}

QString MainWindow::usageGuidePath()
{
    for (const QString& dir : {QStringLiteral(SHARD_DOC_DIR), QStringLiteral(SHARD_SOURCE_DIR),
             QCoreApplication::applicationDirPath() + "/../share/doc/shard-studio"}) {
        const QString path = QDir(dir).filePath("README.md");
        if (QFileInfo::exists(path))
            return QDir::cleanPath(path);
    }
    return {};
}

void MainWindow::showUsageGuide()
{
    const QString path = usageGuidePath();
    QFile file(path);
    if (path.isEmpty() || !file.open(QIODevice::ReadOnly)) {
        QMessageBox::information(this, tr("Usage guide"),
            tr("The usage guide (README.md) is not installed with this copy of Shard Studio."));
        return;
    }
    auto* dialog = new QDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setWindowTitle(tr("Shard Studio usage guide"));
    dialog->resize(900, 700);
    auto* text = new QTextBrowser(dialog);
    text->setObjectName("usageGuide");
    text->setOpenExternalLinks(true);
    text->setSearchPaths({QFileInfo(path).absolutePath()});
    text->setMarkdown(QString::fromUtf8(file.readAll()));
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(text);
    dialog->show();
    // The guide opens at the studio's own section, not at the build and CI instructions.
    for (QTextBlock b = text->document()->begin(); b.isValid(); b = b.next())
        if (b.blockFormat().headingLevel() > 0 && b.text() == QLatin1String("The studio")) {
            QTextCursor at(b);
            text->setTextCursor(at);
            text->verticalScrollBar()->setValue(
                int(text->document()->documentLayout()->blockBoundingRect(b).top()));
            break;
        }
}

void MainWindow::wirePages()
{
    m_runs->setStore(m_store);
    m_launch->setStore(m_store);
    connect(m_hosts, &HostsPage::hostsChanged, this, [this] {
        m_launch->setHosts(m_hosts->hosts());
        m_runs->setHosts(m_hosts->hosts());
    });
    connect(m_hosts, &HostsPage::planRequested, this,
        [this](const QString& gpuName, double memoryMiB, int count) {
            m_plan->useHostGpus(gpuName, memoryMiB, count);
            showPage(Page::Plan);
        });
    m_monitor->setPredictor(&planOfRunSpec);
    m_monitor->setStore(m_store);
    connect(
        m_store, &jobs::RunService::runsListed, this, [this](const QVector<jobs::RunRecord>& r) {
            QVector<jobs::RunRecord> running;
            QStringList dirs;
            for (const auto& run : r) {
                if (!run.runDir.isEmpty())
                    dirs << run.runDir;
                if (run.status == jobs::RunStatus::Running || run.status == jobs::RunStatus::Queued)
                    running.push_back(run);
            }
            m_monitor->setRunningRuns(running);
            m_playground->setRuns(dirs);
        });
    connect(m_store, &jobs::RunService::launched, this,
        [this](qint64 id, const QString& dir, bool remote) {
            if (remote)
                statusBar()->showMessage(
                    tr("Run %1 started remotely in %2.").arg(id).arg(dir), 15000);
            monitorRun(QString::number(id));
        });
    connect(m_store, &jobs::RunService::errorOccurred, this,
        [this](const QString& message) { statusBar()->showMessage(message, 15000); });
    connect(m_store, &jobs::RunService::openFailed, this,
        [this](const QString& message) { statusBar()->showMessage(message); });
    connect(m_store, &jobs::RunService::opened, this,
        [this](const QString& path, bool readOnly, const QString& warning) {
            statusBar()->showMessage(readOnly
                    ? tr("Run store %1 (read-only: %2)").arg(path, warning)
                    : tr("Run store: %1").arg(path));
        });
    connect(m_store, &jobs::RunService::seriesLoaded, this,
        [this](quint64 ticket, const std::vector<jobs::RunSeries>& runs) {
            if (ticket != m_ticket)
                return;
            for (const jobs::RunSeries& run : runs)
                m_compare->addRun(run);
        });
    connect(
        m_runs, &RunsPage::monitorRequested, this, [this](const QString& dir) { monitorRun(dir); });
    connect(m_runs, &RunsPage::compareRequested, this, [this](const QVector<qint64>& ids) {
        QStringList list;
        for (qint64 id : ids)
            list << QString::number(id);
        compareRuns(list);
    });
    connect(m_plan, &PlanPage::launchRequested, this,
        [this](const plan::PlanInput& in, const QString& source) {
            m_launch->applyPlan(in, source);
            showPage(Page::Launch);
        });
}

void MainWindow::monitorRun(const QString& folderOrId)
{
    bool numeric = false;
    const qint64 id = folderOrId.toLongLong(&numeric);
    if (numeric && !QDir(folderOrId).exists()) {
        // A recorded run, wherever it runs: followed through the store.
        m_monitor->openStoreRun(id);
    } else {
        m_monitor->openRunDirectory(folderOrId);
    }
    showPage(Page::Monitor);
}

void MainWindow::compareRuns(const QStringList& foldersOrIds)
{
    QVector<qint64> ids;
    for (const QString& s : foldersOrIds) {
        bool numeric = false;
        const qint64 id = s.toLongLong(&numeric);
        if (numeric && !QDir(s).exists())
            ids.append(id);
        else
            m_compare->addRunDirectory(s);
    }
    if (!ids.isEmpty())
        m_store->loadSeries(ids, ++m_ticket);
    showPage(Page::Compare);
}

void MainWindow::showPage(Page page)
{
    m_nav->setCurrentRow(int(page));
    if (QWidget* w = m_stack->currentWidget())
        w->setFocus(Qt::OtherFocusReason);
}

Page MainWindow::currentPage() const
{
    return Page(m_stack->currentIndex());
}

void MainWindow::setTheme(ThemeKind kind)
{
    m_theme = kind;
    Theme::apply(kind);
    m_plan->restyle();
    m_monitor->restyle();
    m_compare->restyle();
    if (auto* a = findChild<QAction*>("darkThemeAction")) {
        QSignalBlocker block(a);
        a->setChecked(kind == ThemeKind::Dark);
    }
}

void MainWindow::restoreSettings()
{
    QSettings s;
    restoreGeometry(s.value("window/geometry").toByteArray());
    restoreState(s.value("window/state").toByteArray());
    setTheme(Theme::fromName(s.value("window/theme", "light").toString()));
    m_plan->loadSettings();
    m_launch->loadSettings();
    m_hosts->loadSettings();
    m_launch->setHosts(m_hosts->hosts());
    m_runs->setHosts(m_hosts->hosts());
    // The run being followed when the studio closed, if it was still going: followed again.
    const QString followed = s.value("monitor/followed").toString();
    if (auto page = pageFromName(s.value("window/page", "plan").toString()))
        showPage(*page);
    if (!followed.isEmpty()) {
        monitorRun(followed);
        if (auto page = pageFromName(s.value("window/page", "plan").toString()))
            showPage(*page);
    }
}

void MainWindow::saveSettings() const
{
    QSettings s;
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/state", saveState());
    s.setValue("window/theme", Theme::name(m_theme));
    s.setValue("window/page", pageName(currentPage()));
    const QString followed = m_monitor->storeRunId() != 0 ? QString::number(m_monitor->storeRunId())
                                                          : m_monitor->runDirectory();
    s.setValue("monitor/followed", m_monitor->finished() ? QString() : followed);
    m_plan->saveSettings();
    m_launch->saveSettings();
    m_hosts->saveSettings();
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    saveSettings();
    event->accept();
}

void MainWindow::flushCharts()
{
    m_monitor->flushCharts();
    m_compare->flushCharts();
    m_plan->chart()->flushNow();
}

} // namespace shard::widgets
