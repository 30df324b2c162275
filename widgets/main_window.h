// The studio's main window: a page list (Plan, Launch, Monitor, Runs, Compare, Hosts,
// Playground) beside a stack of pages, keyboard navigation (Ctrl+1..7, Ctrl+O), light/dark
// palettes, and window state plus last choices remembered in QSettings.
#pragma once

#include <optional>

#include <QHash>
#include <QMainWindow>

#include "widgets/theme.h"

class QListWidget;
class QStackedWidget;

namespace shard::jobs {
class RunService;
}

namespace shard::widgets {

class ComparePage;
class HostsPage;
class LaunchPage;
class MonitorPage;
class PlanPage;
class PlaygroundPage;
class RunsPage;

enum class Page { Plan, Launch, Monitor, Runs, Compare, Hosts, Playground };
constexpr int kPageCount = 7;

QString pageName(Page page); // "plan", "launch", ...
std::optional<Page> pageFromName(const QString& name);

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    // `storePath` empty: RunStore::defaultPath() ($SHARD_STORE or the app data folder).
    explicit MainWindow(const QString& storePath = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    void showPage(Page page);
    Page currentPage() const;
    void setTheme(ThemeKind kind);
    ThemeKind theme() const { return m_theme; }

    PlanPage* planPage() const { return m_plan; }
    LaunchPage* launchPage() const { return m_launch; }
    MonitorPage* monitorPage() const { return m_monitor; }
    RunsPage* runsPage() const { return m_runs; }
    ComparePage* comparePage() const { return m_compare; }
    HostsPage* hostsPage() const { return m_hosts; }
    PlaygroundPage* playgroundPage() const { return m_playground; }
    jobs::RunService* store() const { return m_store; }
    // Opens a run in the Monitor: a run folder, or a run id of the store.
    void monitorRun(const QString& folderOrId);
    // Adds runs to Compare: run folders or run ids of the store.
    void compareRuns(const QStringList& foldersOrIds);

    // Help ▸ Keyboard shortcuts: every menu shortcut (rich text table).
    QString shortcutsText() const;
    // The README shown by Help ▸ Usage guide; empty when it is not installed.
    static QString usageGuidePath();
    void showUsageGuide();

    void restoreSettings();
    void saveSettings() const;
    // Draws every chart now (screenshots).
    void flushCharts();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void wirePages();

    QListWidget* m_nav = nullptr;
    QStackedWidget* m_stack = nullptr;
    PlanPage* m_plan = nullptr;
    LaunchPage* m_launch = nullptr;
    MonitorPage* m_monitor = nullptr;
    RunsPage* m_runs = nullptr;
    ComparePage* m_compare = nullptr;
    HostsPage* m_hosts = nullptr;
    PlaygroundPage* m_playground = nullptr;
    jobs::RunService* m_store = nullptr;
    quint64 m_ticket = 0;
    ThemeKind m_theme = ThemeKind::Light;
};

} // namespace shard::widgets
