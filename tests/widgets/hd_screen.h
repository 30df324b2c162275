// The offscreen platform's default screen is 800x800, narrower than the studio window's minimum
// width, and Qt 6.8 fits a restored geometry into the screen (Qt 6.4 did not): the tests that show
// the whole window run on a 1920x1080 offscreen screen, as a studio user's desktop is.
#pragma once

#include <QFile>
#include <QTemporaryDir>

namespace shard::test {

// Call before the QApplication is made; `dir` holds the screen's configuration and must outlive
// the application. Other platforms (xcb under xvfb-run) keep their own screen.
inline void useHdOffscreenScreen(const QTemporaryDir& dir)
{
    if (qEnvironmentVariable("QT_QPA_PLATFORM") != QLatin1String("offscreen"))
        return;
    QFile config(dir.filePath("offscreen.json"));
    if (!config.open(QIODevice::WriteOnly))
        return;
    config.write(R"({"screens":[{"name":"hd","x":0,"y":0,"width":1920,"height":1080,)"
                 R"("logicalDpi":96}]})");
    config.close();
    qputenv("QT_QPA_PLATFORM", "offscreen:configfile=" + config.fileName().toUtf8());
}

} // namespace shard::test
