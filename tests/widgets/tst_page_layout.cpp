// Every page works at 1024x700 (issue 27, item 10): the window keeps that size on each page, the
// Plan chart's title and table cells are shown whole, the Monitor's labels under its memory bars
// do not run into each other, and the Playground's token stats do not widen the window.
// SHARD_LAYOUT_PNG=DIR also writes each page, at 1024x700 and 1600x1000, light and dark, there.
#include <QtTest>

#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QTableWidget>
#include <QTemporaryDir>

#include "hd_screen.h"
#include "studio_test_util.h"
#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/monitor_page.h"
#include "widgets/plan_page.h"
#include "widgets/playground_page.h"
#include "widgets/qcp.h"
#include "widgets/theme.h"

using namespace shard::widgets;

namespace {

const QSize kSmall(1024, 700);

void settle()
{
    for (int i = 0; i < 5; ++i)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
}

// Each line of `text` is no wider than `px` in `font`.
bool linesFit(const QString& text, const QFont& font, double px, QString* worst)
{
    const QFontMetrics metrics(font);
    for (const QString& line : text.split('\n')) {
        if (metrics.horizontalAdvance(line) > px) {
            *worst = QString("'%1' is %2 px, room for %3")
                         .arg(line)
                         .arg(metrics.horizontalAdvance(line))
                         .arg(px);
            return false;
        }
    }
    return true;
}

} // namespace

class TstPageLayout : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        shard::test::isolateSettings(m_settings.path());
        qputenv("SHARD_STORE", m_tmp.filePath("store.sqlite").toUtf8());
    }

    void everyPageKeepsTheSmallWindow()
    {
        MainWindow w;
        w.resize(kSmall);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        for (int i = 0; i < kPageCount; ++i) {
            w.showPage(Page(i));
            settle();
            QVERIFY2(w.minimumSizeHint().width() <= kSmall.width()
                    && w.minimumSizeHint().height() <= kSmall.height(),
                qPrintable(QString("page %1 needs %2x%3")
                               .arg(i)
                               .arg(w.minimumSizeHint().width())
                               .arg(w.minimumSizeHint().height())));
            QCOMPARE(w.size(), kSmall);
        }
    }

    void launchFieldsNeedNoSideways()
    {
        MainWindow w;
        w.resize(kSmall);
        w.show();
        w.showPage(Page::Launch);
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        settle();
        auto* scroll = w.launchPage()->findChild<QScrollArea*>("fieldsScroll");
        QVERIFY(scroll);
        QVERIFY2(!scroll->horizontalScrollBar()->isVisible(),
            qPrintable(QString("the fields need %1 px, the page shows %2")
                           .arg(scroll->widget()->minimumSizeHint().width())
                           .arg(scroll->viewport()->width())));
    }

    void planChartTitleAndTableShowWhole()
    {
        MainWindow w;
        w.resize(kSmall);
        w.show();
        w.showPage(Page::Plan);
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        PlanPage* plan = w.planPage();
        QTRY_VERIFY(!plan->results().empty());
        settle();
        MemoryBarChart* chart = plan->chart();
        QVERIFY2(chart->title().contains("capacity"), qPrintable(chart->title()));
        QString why;
        auto* title
            = qobject_cast<QCPTextElement*>(chart->customPlot()->plotLayout()->element(0, 0));
        QVERIFY(title);
        QVERIFY2(linesFit(title->text(), title->font(), chart->width() - 4, &why), qPrintable(why));

        auto* table = plan->findChild<QTableWidget*>("components");
        QVERIFY(table);
        QVERIFY(table->columnCount() >= 4);
        const QFontMetrics metrics(table->font());
        for (int row = 0; row < table->rowCount(); ++row) {
            if (table->isRowHidden(row))
                continue;
            // One line per row: no "0.\n16".
            QVERIFY2(table->rowHeight(row) < 2 * metrics.lineSpacing(),
                qPrintable(QString("row %1 is %2 px").arg(row).arg(table->rowHeight(row))));
            for (int c = 0; c < table->columnCount(); ++c) {
                const QString text = table->item(row, c)->text();
                QVERIFY2(metrics.horizontalAdvance(text) <= table->columnWidth(c),
                    qPrintable(
                        QString("'%1' in a %2 px column").arg(text).arg(table->columnWidth(c))));
            }
        }
    }

    void monitorMemoryLabelsDoNotOverlap()
    {
        MainWindow w;
        w.resize(kSmall);
        w.show();
        w.showPage(Page::Monitor);
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto* chart = w.monitorPage()->findChild<MemoryBarChart*>();
        QVERIFY(chart);
        const double mib = 1024.0 * 1024.0;
        std::vector<MemoryBar> bars;
        for (int r = 0; r < 2; ++r) {
            MemoryBar bar;
            bar.label = QString("rank %1").arg(r);
            bar.bytes = std::vector<double>(size_t(chart->categories().size()), 5 * mib);
            bar.measuredPeakBytes = 29.8 * mib;
            bar.predictedBytes = 29.4 * mib;
            bars.push_back(bar);
        }
        chart->setBars(bars);
        settle();
        chart->flushNow();
        QCPAxis* x = chart->customPlot()->xAxis;
        auto ticker = x->ticker().dynamicCast<QCPAxisTickerText>();
        QVERIFY(ticker);
        const double spacing = x->coordToPixel(2) - x->coordToPixel(1);
        QVERIFY(spacing > 0);
        QString why;
        for (const QString& label : ticker->ticks()) {
            QVERIFY2(label.contains("peak 29.8") && label.contains("plan 29.4"), qPrintable(label));
            QVERIFY2(linesFit(label, x->tickLabelFont(), spacing - 4, &why), qPrintable(why));
        }
    }

    void playgroundStatsDoNotWidenTheWindow()
    {
        MainWindow w;
        w.resize(kSmall);
        w.show();
        w.showPage(Page::Playground);
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        for (const char* name : {"status", "compareStatus"}) {
            auto* status = w.playgroundPage()->findChild<QLabel*>(name);
            QVERIFY(status);
            // What a summary says after a long answer, in both panes.
            status->setText("200 tokens (stop: max tokens) · prompt 1234 tokens at 15321 tok/s · "
                            "decode 1234.5 tok/s · loaded stories260K (260,000 parameters, fp32)");
        }
        settle();
        QVERIFY2(w.minimumSizeHint().width() <= kSmall.width(),
            qPrintable(QString::number(w.minimumSizeHint().width())));
        QCOMPARE(w.size(), kSmall);
    }

    // Not a check: pictures to look at (SHARD_LAYOUT_PNG=DIR).
    void renderPages()
    {
        const QString dir = qEnvironmentVariable("SHARD_LAYOUT_PNG");
        if (dir.isEmpty())
            QSKIP("SHARD_LAYOUT_PNG is not set");
        for (ThemeKind theme : {ThemeKind::Light, ThemeKind::Dark}) {
            for (QSize size : {kSmall, QSize(1600, 1000)}) {
                MainWindow w;
                w.setTheme(theme);
                w.resize(size);
                w.show();
                QVERIFY(QTest::qWaitForWindowExposed(&w));
                QTRY_VERIFY(!w.planPage()->results().empty());
                for (int i = 0; i < kPageCount; ++i) {
                    w.showPage(Page(i));
                    settle();
                    w.flushCharts();
                    const QString file = QString("%1/page%2-%3x%4-%5.png")
                                             .arg(dir)
                                             .arg(i)
                                             .arg(size.width())
                                             .arg(size.height())
                                             .arg(theme == ThemeKind::Dark ? "dark" : "light");
                    QVERIFY(w.grab().save(file));
                }
                w.setTheme(ThemeKind::Light);
            }
        }
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
    TstPageLayout test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}
#include "tst_page_layout.moc"
