// The model-parallel layout fields, shared by the Plan and Launch pages: tensor parallel,
// pipeline stages, chunks per stage (interleaved 1F1B) and sequence parallel. Chunks per stage
// are offered only with two stages or more and sequence parallel only with tensor parallel 2 or
// more, as the engine trains them; what else the engine refuses (a size that does not divide the
// heads, the ranks, the vocabulary or --seq-len) the page shows from plan::tensorParallelRefusal
// and plan::pipelineParallelRefusal.
#pragma once

#include <QList>
#include <QObject>

#include "plan/planner.h"
#include "protocol/run_spec.h"

class QCheckBox;
class QFormLayout;
class QSettings;
class QSpinBox;
class QWidget;

namespace shard::widgets {

class ParallelFields : public QObject {
    Q_OBJECT
public:
    // The fields are children of `parent` (object names tensorParallel, pipelineParallel,
    // virtualStages, sequenceParallel).
    explicit ParallelFields(QWidget* parent);

    // Adds a row per field to `form`.
    void addRows(QFormLayout* form) const;
    // In tab order.
    QList<QWidget*> widgets() const;

    int tensorParallel() const;
    int pipelineStages() const;

    void writeTo(protocol::RunSpec& spec) const;
    void writeTo(plan::PlanInput& in) const;
    void show(const protocol::RunSpec& spec);
    void show(const plan::PlanInput& in);

    // Keys tp, pp, virtualStages and sequenceParallel in the settings' current group.
    void save(QSettings& settings) const;
    void restore(const QSettings& settings);

Q_SIGNALS:
    void changed();

private:
    void show(int tp, int pp, int virtualStages, bool sequenceParallel);
    void updateEnabled();

    QSpinBox* m_tp = nullptr;                // run spec tensor_parallel
    QSpinBox* m_pp = nullptr;                // run spec pipeline_parallel
    QSpinBox* m_virtualStages = nullptr;     // run spec virtual_stages
    QCheckBox* m_sequenceParallel = nullptr; // run spec sequence_parallel
};

} // namespace shard::widgets
