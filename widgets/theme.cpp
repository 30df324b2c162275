// Fusion palettes (light, dark) and chart colours.
#include "widgets/theme.h"

#include <QApplication>
#include <QStyleFactory>

#include "widgets/qcp.h"

namespace shard::widgets {

namespace {
ThemeKind g_current = ThemeKind::Light;
} // namespace

ThemeKind Theme::current()
{
    return g_current;
}

QPalette Theme::palette(ThemeKind kind)
{
    if (kind == ThemeKind::Light) {
        QPalette p;
        p.setColor(QPalette::Window, QColor(246, 246, 248));
        p.setColor(QPalette::WindowText, QColor(28, 28, 32));
        p.setColor(QPalette::Base, Qt::white);
        p.setColor(QPalette::AlternateBase, QColor(240, 241, 245));
        p.setColor(QPalette::Text, QColor(28, 28, 32));
        p.setColor(QPalette::Button, QColor(236, 236, 240));
        p.setColor(QPalette::ButtonText, QColor(28, 28, 32));
        p.setColor(QPalette::Highlight, QColor(38, 110, 200));
        p.setColor(QPalette::HighlightedText, Qt::white);
        p.setColor(QPalette::ToolTipBase, QColor(255, 255, 225));
        p.setColor(QPalette::ToolTipText, Qt::black);
        p.setColor(QPalette::PlaceholderText, QColor(130, 130, 140));
        p.setColor(QPalette::Disabled, QPalette::Text, QColor(150, 150, 155));
        p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(150, 150, 155));
        p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(150, 150, 155));
        return p;
    }
    QPalette p;
    p.setColor(QPalette::Window, QColor(37, 38, 43));
    p.setColor(QPalette::WindowText, QColor(225, 226, 230));
    p.setColor(QPalette::Base, QColor(27, 28, 32));
    p.setColor(QPalette::AlternateBase, QColor(44, 45, 51));
    p.setColor(QPalette::Text, QColor(225, 226, 230));
    p.setColor(QPalette::Button, QColor(50, 51, 58));
    p.setColor(QPalette::ButtonText, QColor(225, 226, 230));
    p.setColor(QPalette::BrightText, QColor(255, 90, 90));
    p.setColor(QPalette::Link, QColor(110, 170, 255));
    p.setColor(QPalette::Highlight, QColor(60, 130, 220));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::ToolTipBase, QColor(50, 51, 58));
    p.setColor(QPalette::ToolTipText, QColor(225, 226, 230));
    p.setColor(QPalette::PlaceholderText, QColor(130, 132, 140));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(110, 112, 120));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(110, 112, 120));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(110, 112, 120));
    return p;
}

void Theme::apply(ThemeKind kind)
{
    g_current = kind;
    if (auto* style = QStyleFactory::create("Fusion"))
        QApplication::setStyle(style);
    QApplication::setPalette(palette(kind));
}

QString Theme::name(ThemeKind kind)
{
    return kind == ThemeKind::Dark ? "dark" : "light";
}

ThemeKind Theme::fromName(const QString& name)
{
    return name.compare("dark", Qt::CaseInsensitive) == 0 ? ThemeKind::Dark : ThemeKind::Light;
}

QColor Theme::seriesColor(int index)
{
    static const QColor colors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
        QColor(214, 39, 40), QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194),
        QColor(127, 127, 127), QColor(188, 189, 34), QColor(23, 190, 207)};
    constexpr int n = int(sizeof(colors) / sizeof(colors[0]));
    return colors[((index % n) + n) % n];
}

QColor Theme::categoryColor(int index)
{
    static const QColor colors[] = {QColor(78, 121, 167), QColor(160, 203, 232),
        QColor(242, 142, 43), QColor(225, 87, 89), QColor(118, 183, 178), QColor(89, 161, 79),
        QColor(237, 201, 72), QColor(176, 122, 161), QColor(156, 117, 95), QColor(186, 176, 172),
        QColor(31, 119, 180), QColor(214, 39, 40), QColor(44, 160, 44)};
    constexpr int n = int(sizeof(colors) / sizeof(colors[0]));
    return colors[((index % n) + n) % n];
}

void Theme::stylePlot(QCustomPlot* plot)
{
    const QPalette p = palette(g_current);
    const QColor fg = p.color(QPalette::WindowText);
    const QColor grid = g_current == ThemeKind::Dark ? QColor(70, 72, 80) : QColor(222, 223, 228);
    plot->setBackground(p.color(QPalette::Base));
    for (QCPAxis* axis : plot->axisRect()->axes()) {
        axis->setBasePen(QPen(fg, 1));
        axis->setTickPen(QPen(fg, 1));
        axis->setSubTickPen(QPen(fg, 1));
        axis->setTickLabelColor(fg);
        axis->setLabelColor(fg);
        axis->grid()->setPen(QPen(grid, 1, Qt::SolidLine));
        axis->grid()->setSubGridVisible(false);
    }
    if (plot->legend) {
        plot->legend->setBrush(p.color(QPalette::Base));
        plot->legend->setTextColor(fg);
        plot->legend->setBorderPen(QPen(grid));
    }
}

} // namespace shard::widgets
