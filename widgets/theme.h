// Light and dark palettes for the studio and the colours charts draw with, so a plot follows the
// window's theme instead of hard-coding white.
#pragma once

#include <QColor>
#include <QPalette>
#include <QString>

class QCustomPlot;

namespace shard::widgets {

enum class ThemeKind { Light, Dark };

class Theme {
public:
    static ThemeKind current();
    // Sets the Fusion style's palette on the application and remembers the kind.
    static void apply(ThemeKind kind);
    static QPalette palette(ThemeKind kind);
    static QString name(ThemeKind kind);
    static ThemeKind fromName(const QString& name); // unknown names give Light

    // A qualitative palette (Tableau 10); index wraps around.
    static QColor seriesColor(int index);
    // Memory categories share one colour each across every chart.
    static QColor categoryColor(int index);
    // Background, axes, grid and text colours of a QCustomPlot for the current theme.
    static void stylePlot(QCustomPlot* plot);
};

} // namespace shard::widgets
