// The fine-tuning method and its LoRA / QLoRA fields, shared by the Plan and Launch pages:
// method, rank, alpha, dropout, targets, rsLoRA and QLoRA's double quantisation; then the
// training objective (supervised, DPO, ORPO) with DPO's loss, beta, label smoothing and
// reference, and ORPO's lambda. The LoRA fields are enabled only for LoRA and QLoRA, double
// quantisation only for QLoRA, each objective's fields only for it (label smoothing for DPO's
// sigmoid loss; a live reference, the LoRA base or a frozen copy of the model, except for full
// fine-tuning under tensor or pipeline parallel, as the engine trains). The ranges are the
// engine's (rank >= 1, dropout in [0, 1)), so the form offers nothing the engine refuses; the
// targets are checked by the run spec's validation where the page shows its errors.
#pragma once

#include <QList>
#include <QObject>

#include "plan/planner.h"
#include "protocol/run_spec.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLineEdit;
class QSettings;
class QSpinBox;
class QWidget;

namespace shard::widgets {

class LoraFields : public QObject {
    Q_OBJECT
public:
    // The fields are children of `parent` (object names method, loraRank, loraAlpha,
    // loraDropout, loraTargets, loraRslora, doubleQuant, objective, dpoLoss, dpoBeta,
    // dpoLabelSmoothing, dpoNllWeight, orpoLambda, reference).
    explicit LoraFields(QWidget* parent);

    // Adds a row per field to `form`, the method first.
    void addRows(QFormLayout* form) const;
    // In tab order.
    QList<QWidget*> widgets() const;

    void writeTo(protocol::RunSpec& spec) const;
    void writeTo(plan::PlanInput& in) const;
    void show(const protocol::RunSpec& spec);

    // The objective chosen: "sft", "dpo" or "orpo".
    QString objective() const;
    // Whether the layout splits the model (ParallelFields: tensor parallel or pipeline stages):
    // full fine-tuning's live reference (a frozen copy of the model) is then not offered, as the
    // engine refuses it.
    void setModelParallel(bool on);

    // Keys method, loraRank, ... in the settings' current group.
    void save(QSettings& settings) const;
    void restore(const QSettings& settings);

Q_SIGNALS:
    void changed();

private:
    void updateEnabled();

    QComboBox* m_method = nullptr; // full, lora, qlora
    QSpinBox* m_rank = nullptr;
    QDoubleSpinBox* m_alpha = nullptr;
    QDoubleSpinBox* m_dropout = nullptr;
    QLineEdit* m_targets = nullptr;
    QCheckBox* m_rslora = nullptr;
    QCheckBox* m_doubleQuant = nullptr;
    QComboBox* m_objective = nullptr; // sft, dpo, orpo
    QComboBox* m_dpoLoss = nullptr;   // sigmoid, ipo
    QDoubleSpinBox* m_dpoBeta = nullptr;
    QDoubleSpinBox* m_labelSmoothing = nullptr;
    QDoubleSpinBox* m_orpoLambda = nullptr;
    QDoubleSpinBox* m_dpoNllWeight = nullptr;
    QComboBox* m_reference = nullptr; // auto, live, precomputed
    bool m_modelParallel = false;
};

} // namespace shard::widgets
