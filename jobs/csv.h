// CSV fields as `shard runs export` and Compare's Export CSV write them (RFC 4180): a number in
// full precision, empty where a run logged no value; a text quoted when it holds a comma, a
// quote or a line break.
#pragma once

#include <cmath>

#include <QString>

namespace shard::jobs {

inline QString csvNumber(double v)
{
    return std::isfinite(v) ? QString::number(v, 'g', 10) : QString();
}

inline QString csvText(const QString& text)
{
    if (!text.contains(',') && !text.contains('"') && !text.contains('\n') && !text.contains('\r'))
        return text;
    return '"' + QString(text).replace("\"", "\"\"") + '"';
}

} // namespace shard::jobs
