// Text from runs (names, messages) as the terminal gets it: control characters are shown
// escaped (\n, \t, \x1b, \u{9b}), so a hostile run name cannot move the cursor, recolour the
// screen or fake lines of output.
#pragma once

#include <QByteArray>
#include <QString>

namespace shard::cli {

inline QByteArray terminalText(const QString& text)
{
    QString out;
    out.reserve(text.size());
    for (const QChar c : text) {
        const char16_t u = c.unicode();
        if (u == '\n')
            out += QStringLiteral("\\n");
        else if (u == '\t')
            out += QStringLiteral("\\t");
        else if (u == '\r')
            out += QStringLiteral("\\r");
        else if (u < 0x20 || u == 0x7f)
            out += QStringLiteral("\\x%1").arg(int(u), 2, 16, QLatin1Char('0'));
        else if ((u >= 0x80 && u < 0xa0) || u == 0x2028 || u == 0x2029
            || (u >= 0x202a && u <= 0x202e) || (u >= 0x2066 && u <= 0x2069))
            out += QStringLiteral("\\u{%1}").arg(int(u), 0, 16); // C1, line breaks, bidi
        else
            out += c;
    }
    return out.toUtf8();
}

} // namespace shard::cli
