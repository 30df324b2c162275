// shard-studio: the desktop studio. `--screenshot FILE.png [--page P] [--run ID]` renders one
// page offscreen to a PNG (for the docs and tests) and exits.
#include <algorithm>
#include <cstdio>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QPixmap>
#include <QTimer>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "jobs/run_series.h"
#include "shard/version.h"
#include "widgets/compare_page.h"
#include "widgets/hosts_page.h"
#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"
#include "widgets/plan_page.h"
#include "widgets/playground_page.h"
#include "widgets/runs_page.h"

using namespace shard::widgets;
using namespace shard;

namespace {

bool hasArg(int argc, char** argv, const char* name)
{
    for (int i = 1; i < argc; ++i)
        if (QByteArray(argv[i]) == name || QByteArray(argv[i]).startsWith(QByteArray(name) + "="))
            return true;
    return false;
}

// Runs the event loop until `done` holds or the deadline passes.
template<class Done> void waitUntil(Done done, int timeoutMs)
{
    QElapsedTimer t;
    t.start();
    while (!done() && t.elapsed() < timeoutMs)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
}

int screenshot(
    MainWindow& window, const QString& file, Page page, const QStringList& runs, QSize size)
{
    window.resize(size);
    window.showPage(page);
    window.show();
    bool ready = false;
    bool failed = false;
    QString why;
    switch (page) {
    case Page::Monitor:
        if (runs.isEmpty())
            break;
        QObject::connect(
            window.monitorPage(), &MonitorPage::pointsArrived, &window, [&] { ready = true; });
        window.monitorRun(runs.front());
        waitUntil([&] { return ready || !window.monitorPage()->messageText().isEmpty(); }, 8000);
        // Let the rest of a file that is being written arrive.
        waitUntil([] { return false; }, 600);
        break;
    case Page::Compare:
        if (runs.isEmpty())
            break;
        QObject::connect(
            window.comparePage(), &ComparePage::loadFailed, &window, [&](const QString& m) {
                failed = true;
                why = m;
            });
        window.compareRuns(runs);
        waitUntil([&] { return failed || window.comparePage()->runCount() >= runs.size(); }, 8000);
        break;
    case Page::Launch:
        if (!runs.isEmpty()) {
            auto loaded = jobs::loadRunDirectory(runs.front());
            if (!loaded) {
                failed = true;
                why = loaded.error();
            } else {
                window.launchPage()->loadRunSpec(loaded.value().config);
            }
        }
        // The fields' preflight (model, data, fit) runs off the UI thread: its findings shown.
        waitUntil([&] { return !window.launchPage()->checking(); }, 8000);
        break;
    case Page::Runs:
        QObject::connect(window.runsPage(), &RunsPage::refreshed, &window, [&] { ready = true; });
        waitUntil([&] { return ready; }, 8000);
        break;
    case Page::Plan:
        waitUntil([&] { return !window.planPage()->results().empty(); }, 8000);
        break;
    case Page::Playground:
        // --run MODEL[,COMPARED]: both answer the same prompt with the same seed.
        if (runs.isEmpty())
            break;
        {
            PlaygroundPage* pg = window.playgroundPage();
            for (int i = 0; i < std::min<int>(runs.size(), PlaygroundPage::kPanes); ++i)
                pg->setModelPath(i, runs[i]);
            pg->setPrompt(QStringLiteral("Once upon a time"));
            pg->setSampling(0.8, 40, 0.95, 0.0, 7);
            pg->setMaxNewTokens(120);
            pg->generate();
            waitUntil([&] { return !pg->isRunning(); }, 60000);
            if (!pg->messageText().isEmpty()) {
                failed = true;
                why = pg->messageText();
            }
        }
        break;
    default:
        break;
    }
    waitUntil([] { return false; }, 200);
    window.flushCharts();
    const QPixmap pixmap = window.grab();
    if (!pixmap.save(file, "PNG")) {
        std::fprintf(
            stderr, "shard-studio: cannot write %s (check the folder exists)\n", qPrintable(file));
        return 1;
    }
    if (failed) {
        std::fprintf(stderr, "shard-studio: %s\n", qPrintable(why));
        return 1;
    }
    std::printf("%s\n", qPrintable(QFileInfo(file).absoluteFilePath()));
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    // Screenshots render offscreen; the platform must be chosen before QApplication exists.
    if (hasArg(argc, argv, "--screenshot") && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QGuiApplication::setHighDpiScaleFactorRoundingPolicy(
        Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
    QApplication app(argc, argv);
    QApplication::setApplicationName("shard-studio");
    QApplication::setOrganizationName("ShardStudio");
    QApplication::setApplicationVersion(SHARD_VERSION);
    spdlog::set_default_logger(spdlog::stderr_color_mt("studio"));
    spdlog::set_level(spdlog::level::warn);

    QCommandLineParser parser;
    parser.setApplicationDescription(
        "Shard Studio: plan, launch, monitor and compare sharded fine-tuning runs.");
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption shotOpt(
        "screenshot", "Render a page offscreen to FILE.png and exit.", "FILE.png");
    QCommandLineOption pageOpt("page",
        "Page to show: plan, launch, monitor, runs, compare, hosts or playground (default plan).",
        "PAGE");
    QCommandLineOption runOpt("run",
        "Run to open on monitor/compare: a run folder or a store id (repeat or comma-separate "
        "for compare); on playground, the model folder(s) to answer a sample prompt.",
        "ID");
    QCommandLineOption themeOpt("theme", "light or dark.", "THEME");
    QCommandLineOption sizeOpt(
        "size", "Window size for --screenshot (default 1440x900).", "WxH", "1440x900");
    QCommandLineOption storeOpt("store",
        "Run store file (default $SHARD_STORE or the app data "
        "folder).",
        "FILE");
    QCommandLineOption planConfigOpt("plan-config",
        "Open the Plan page with another engine's config imported: a DeepSpeed .json, an "
        "accelerate .yaml or a torchtitan .toml.",
        "FILE");
    QCommandLineOption commandOpt("command",
        "Open the Launch page set to run this command instead of the engine (torchrun, "
        "deepspeed, a script).",
        "CMD");
    parser.addOptions(
        {shotOpt, pageOpt, runOpt, themeOpt, sizeOpt, storeOpt, planConfigOpt, commandOpt});
    parser.process(app);

    std::optional<Page> page;
    if (parser.isSet(pageOpt)) {
        page = pageFromName(parser.value(pageOpt));
        if (!page) {
            std::fprintf(stderr,
                "shard-studio: unknown page '%s' (use plan, launch, monitor, runs, compare, "
                "hosts or playground)\n",
                qPrintable(parser.value(pageOpt)));
            return 2;
        }
    }
    const QStringList sizeParts = parser.value(sizeOpt).split('x');
    const QSize size(sizeParts.value(0).toInt(), sizeParts.value(1).toInt());
    if (size.width() < 320 || size.height() < 240) {
        std::fprintf(stderr, "shard-studio: --size must be WxH, at least 320x240 (got %s)\n",
            qPrintable(parser.value(sizeOpt)));
        return 2;
    }
    QStringList runs;
    for (const QString& r : parser.values(runOpt))
        runs << r.split(',', Qt::SkipEmptyParts);

    MainWindow window(parser.value(storeOpt));
    if (parser.isSet(shotOpt)) {
        // Screenshots are reproducible: no saved window state or last choices; the hosts list
        // is data, not a choice, so it is shown.
        window.hostsPage()->loadSettings();
        window.setTheme(
            parser.isSet(themeOpt) ? Theme::fromName(parser.value(themeOpt)) : ThemeKind::Light);
        if (parser.isSet(planConfigOpt))
            window.planPage()->importConfig(parser.value(planConfigOpt));
        if (parser.isSet(commandOpt)) {
            window.launchPage()->setCommandMode(true);
            window.launchPage()->setCommand(parser.value(commandOpt));
        }
        return screenshot(window, parser.value(shotOpt), page.value_or(Page::Plan), runs, size);
    }
    window.restoreSettings();
    if (parser.isSet(themeOpt))
        window.setTheme(Theme::fromName(parser.value(themeOpt)));
    if (page)
        window.showPage(*page);
    if (parser.isSet(commandOpt)) {
        window.launchPage()->setCommandMode(true);
        window.launchPage()->setCommand(parser.value(commandOpt));
        if (!page)
            window.showPage(Page::Launch);
    }
    if (parser.isSet(planConfigOpt)) {
        window.planPage()->importConfig(parser.value(planConfigOpt));
        if (!page)
            window.showPage(Page::Plan);
    }
    if (!runs.isEmpty()) {
        if (page == Page::Compare)
            window.compareRuns(runs);
        else if (page == Page::Playground)
            for (int i = 0; i < std::min<int>(runs.size(), PlaygroundPage::kPanes); ++i)
                window.playgroundPage()->setModelPath(i, runs[i]);
        else
            window.monitorRun(runs.front());
    }
    window.show();
    return app.exec();
}
