// Runs work off the UI thread (QtConcurrent) and hands the result back on the UI thread to a
// callback owned by `context`: if the context is destroyed first, the result is dropped.
#pragma once

#include <type_traits>
#include <utility>

#include <QFutureWatcher>
#include <QObject>
#include <QtConcurrent/QtConcurrentRun>

namespace shard::widgets {

template<class Work, class Done>
QFutureWatcher<std::invoke_result_t<Work>>* runInBackground(QObject* context, Work work, Done done)
{
    using R = std::invoke_result_t<Work>;
    auto* watcher = new QFutureWatcher<R>(context);
    QObject::connect(watcher, &QFutureWatcherBase::finished, context,
        [watcher, done = std::move(done)]() mutable {
            if (!watcher->isCanceled() && watcher->future().resultCount() > 0)
                done(watcher->result());
            watcher->deleteLater();
        });
    watcher->setFuture(QtConcurrent::run(std::move(work)));
    return watcher;
}

} // namespace shard::widgets
