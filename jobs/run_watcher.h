// RunWatcher: the signals a live run's watcher emits after it has ingested new records, so a
// view can redraw from the RunStore. LocalRunWatcher and RemoteRunWatcher implement it.
#pragma once

#include <QObject>
#include <QString>

#include "jobs/run_store.h"

namespace shard::jobs {

class RunWatcher : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;
    virtual qint64 runId() const = 0;

Q_SIGNALS:
    // New metric points are in the store (up to lastStep): fetch metricSeries(runId, since).
    void pointsAdded(qint64 runId, qint64 lastStep);
    void eventsAdded(qint64 runId);
    void statusChanged(qint64 runId, shard::jobs::RunStatus status, const QString& message);
    // Ingestion or connection trouble; the watcher keeps trying unless finished() follows.
    void errorOccurred(qint64 runId, const QString& message);
    // The run ended and everything it wrote is ingested; the watcher is idle now.
    void finished(qint64 runId, shard::jobs::RunStatus status);
};

} // namespace shard::jobs
