// The window: Ctrl+1..6 switch pages, window state / theme / page / last choices survive a
// restart through QSettings, and `shard-studio --screenshot` renders every page to a PNG (and
// refuses an unknown page with a clear message).
#include <QScrollBar>
#include <QTextBlock>
#include <QTextBrowser>
#include <QtTest>

#include <QImage>
#include <QListWidget>
#include <QProcess>
#include <QSettings>
#include <QSpinBox>
#include <QStackedWidget>
#include <QTemporaryDir>

#include "hd_screen.h"
#include "studio_test_util.h"
#include "widgets/main_window.h"
#include "widgets/plan_page.h"

using namespace shard::widgets;

namespace {
const QString kStudio = QStringLiteral(SHARD_BINARY_DIR "/app/studio/shard-studio");
}

class TstMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        shard::test::isolateSettings(m_settings.path());
        qputenv("SHARD_STORE", m_tmp.filePath("store.sqlite").toUtf8());
    }

    void keyboardSwitchesPages()
    {
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w) || QTest::qWaitForWindowExposed(&w));
        for (int i = kPageCount - 1; i >= 0; --i) {
            QTest::keyClick(&w, Qt::Key(Qt::Key_1 + i), Qt::ControlModifier);
            QCOMPARE(int(w.currentPage()), i);
        }
        // The page list is itself keyboard-driven.
        auto* nav = w.findChild<QListWidget*>("navigation");
        nav->setFocus();
        QTest::keyClick(nav, Qt::Key_Down);
        QCOMPARE(w.currentPage(), Page::Launch);
        QCOMPARE(pageFromName("compare"), std::optional<Page>(Page::Compare));
        QVERIFY(!pageFromName("nope"));
    }

    void helpListsShortcutsAndFindsTheGuide()
    {
        MainWindow w;
        const QString keys = w.shortcutsText();
        for (int i = 1; i <= kPageCount; ++i)
            QVERIFY2(keys.contains(QString("Ctrl+%1").arg(i)), qPrintable(keys));
        QVERIFY(keys.contains("Ctrl+O"));
        QVERIFY(keys.contains("Ctrl+Shift+D"));
        QVERIFY(keys.contains("Keyboard shortcuts"));
        const QString guide = MainWindow::usageGuidePath();
        QVERIFY2(!guide.isEmpty(), "README.md not found for Help > Usage guide");
        QFile readme(guide);
        QVERIFY(readme.open(QIODevice::ReadOnly));
        const QByteArray text = readme.readAll();
        QVERIFY(text.contains("## Using it"));
        // One keyboard paragraph, naming every page's shortcut.
        QCOMPARE(text.count("Keyboard:"), 1);
        QVERIFY(text.contains(QString("Ctrl+1…%1 switch pages").arg(kPageCount).toUtf8()));
        // F1 opens it at the studio's section, not at the build and CI instructions on top.
        w.show();
        w.showUsageGuide();
        auto* browser = w.findChild<QTextBrowser*>("usageGuide");
        QVERIFY(browser);
        QCOMPARE(browser->textCursor().block().text(), QString("The studio"));
        QTRY_VERIFY(browser->verticalScrollBar()->value() > 0);
    }

    void settingsSurviveRestart()
    {
        {
            MainWindow w;
            w.resize(1111, 777);
            w.show();
            w.setTheme(ThemeKind::Dark);
            w.showPage(Page::Compare);
            w.planPage()->findChild<QSpinBox*>("microBatch")->setValue(3);
            w.close(); // saves
        }
        MainWindow again;
        again.restoreSettings();
        QCOMPARE(again.currentPage(), Page::Compare);
        QCOMPARE(again.theme(), ThemeKind::Dark);
        QCOMPARE(again.planPage()->findChild<QSpinBox*>("microBatch")->value(), 3);
        QCOMPARE(again.size(), QSize(1111, 777));
        again.setTheme(ThemeKind::Light);
    }

    void screenshotsOfEveryPage()
    {
        QVERIFY2(QFileInfo::exists(kStudio), qPrintable(kStudio));
        for (const char* page :
            {"plan", "launch", "monitor", "runs", "compare", "hosts", "playground"}) {
            const QString png = m_tmp.filePath(QString("%1.png").arg(page));
            QProcess p;
            p.start(kStudio, {"--screenshot", png, "--page", page, "--size", "1000x700"});
            QVERIFY(p.waitForFinished(60000));
            QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
            QImage image(png);
            QVERIFY2(!image.isNull(), page);
            QCOMPARE(image.size(), QSize(1000, 700));
            // Not a blank canvas: many distinct colours.
            QSet<QRgb> colours;
            for (int y = 0; y < image.height(); y += 7)
                for (int x = 0; x < image.width(); x += 7)
                    colours.insert(image.pixel(x, y));
            QVERIFY2(colours.size() > 8, page);
        }
    }

    void screenshotRefusesUnknownPage()
    {
        QProcess p;
        p.start(kStudio, {"--screenshot", m_tmp.filePath("x.png"), "--page", "settings"});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QVERIFY(p.readAllStandardError().contains("unknown page 'settings'"));
        QVERIFY(!QFileInfo::exists(m_tmp.filePath("x.png")));
    }

    void screenshotOfMissingRunFolderFails()
    {
        QProcess p;
        p.start(kStudio,
            {"--screenshot", m_tmp.filePath("c.png"), "--page", "compare", "--run",
                m_tmp.filePath("no-such-run")});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 1);
        QVERIFY(p.readAllStandardError().contains("no such folder"));
    }

private:
    QTemporaryDir m_tmp;
    QTemporaryDir m_settings;
};

// On a 1920x1080 offscreen screen (hd_screen.h).
int main(int argc, char** argv)
{
    QTemporaryDir dir;
    shard::test::useHdOffscreenScreen(dir);
    QApplication app(argc, argv);
    TstMainWindow test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}
#include "tst_main_window.moc"
