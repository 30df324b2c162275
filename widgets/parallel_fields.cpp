// The model-parallel layout fields of the Plan and Launch pages (see parallel_fields.h).
#include "widgets/parallel_fields.h"

#include <QCheckBox>
#include <QFormLayout>
#include <QSettings>
#include <QSpinBox>

namespace shard::widgets {

ParallelFields::ParallelFields(QWidget* parent)
    : QObject(parent)
{
    m_tp = new QSpinBox(parent);
    m_tp->setObjectName("tensorParallel");
    m_tp->setRange(1, 1024);
    m_tp->setToolTip(tr("Tensor parallel (Megatron-LM style): this many consecutive GPUs split "
                        "each block's weights (attention by heads, the MLP by its width) and the "
                        "embedding and head by vocabulary, and compute them together. It must "
                        "divide the heads, key/value heads and MLP width, and the GPUs; the "
                        "data-parallel copies are the GPUs / (tensor x pipeline)."));
    m_pp = new QSpinBox(parent);
    m_pp->setObjectName("pipelineParallel");
    m_pp->setRange(1, 1024);
    m_pp->setToolTip(tr("Pipeline stages: the layers cut into this many contiguous stages, one "
                        "per group of GPUs (the embedding on the first, the head on the last; "
                        "balanced by compute, so a heavy head gets fewer layers); the "
                        "gradient-accumulation micro-batches flow through them in the 1F1B "
                        "order. Each stage needs a layer."));
    m_virtualStages = new QSpinBox(parent);
    m_virtualStages->setObjectName("virtualStages");
    m_virtualStages->setRange(1, 64);
    m_virtualStages->setToolTip(
        tr("Chunks per stage: more than 1 runs interleaved 1F1B (Megatron-LM's virtual pipeline "
           "stages): each stage holds this many separate layer ranges and the bubble, (stages - "
           "1) / (chunks x micro-batches + stages - 1), shrinks by as much. Gradient "
           "accumulation must be a multiple of the stages. Offered with two stages or more."));
    m_sequenceParallel = new QCheckBox(tr("Split along the sequence"), parent);
    m_sequenceParallel->setObjectName("sequenceParallel");
    m_sequenceParallel->setToolTip(
        tr("Sequence parallel (Megatron-LM's --sequence-parallel): between the blocks' matrix "
           "products each tensor-parallel GPU holds its share of the positions, so the norms, "
           "the residual stream and what a block saves for backward take 1/tensor-parallel of "
           "the memory, for the same traffic. Needs the vocabulary and the sequence length "
           "divisible by tensor parallel. Offered with tensor parallel 2 or more."));
    for (QSpinBox* s : {m_tp, m_pp, m_virtualStages})
        connect(s, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
            updateEnabled();
            Q_EMIT changed();
        });
    connect(m_sequenceParallel, &QCheckBox::toggled, this, &ParallelFields::changed);
    updateEnabled();
}

void ParallelFields::addRows(QFormLayout* form) const
{
    form->addRow(tr("Tensor para&llel"), m_tp);
    form->addRow(tr("Pipeline sta&ges"), m_pp);
    form->addRow(tr("C&hunks per stage"), m_virtualStages);
    form->addRow(tr("Sequence parallel"), m_sequenceParallel); // Alt+Q is "Sequence length"
}

QList<QWidget*> ParallelFields::widgets() const
{
    return {m_tp, m_pp, m_virtualStages, m_sequenceParallel};
}

int ParallelFields::tensorParallel() const
{
    return m_tp->value();
}

int ParallelFields::pipelineStages() const
{
    return m_pp->value();
}

void ParallelFields::writeTo(protocol::RunSpec& spec) const
{
    spec.tensorParallel = m_tp->value();
    spec.pipelineParallel = m_pp->value();
    spec.virtualStages = m_pp->value() > 1 ? m_virtualStages->value() : 1;
    spec.sequenceParallel = m_tp->value() > 1 && m_sequenceParallel->isChecked();
}

void ParallelFields::writeTo(plan::PlanInput& in) const
{
    in.tp = m_tp->value();
    in.pp = m_pp->value();
    in.virtualStages = m_pp->value() > 1 ? m_virtualStages->value() : 1;
    in.sequenceParallel = m_tp->value() > 1 && m_sequenceParallel->isChecked();
}

void ParallelFields::show(int tp, int pp, int virtualStages, bool sequenceParallel)
{
    m_tp->setValue(tp);
    m_pp->setValue(pp);
    m_virtualStages->setValue(virtualStages);
    m_sequenceParallel->setChecked(sequenceParallel);
    updateEnabled();
}

void ParallelFields::show(const protocol::RunSpec& spec)
{
    show(spec.tensorParallel, spec.pipelineParallel, spec.virtualStages, spec.sequenceParallel);
}

void ParallelFields::show(const plan::PlanInput& in)
{
    show(static_cast<int>(in.tp), static_cast<int>(in.pp), static_cast<int>(in.virtualStages),
        in.sequenceParallel);
}

void ParallelFields::save(QSettings& settings) const
{
    settings.setValue("tp", m_tp->value());
    settings.setValue("pp", m_pp->value());
    settings.setValue("virtualStages", m_virtualStages->value());
    settings.setValue("sequenceParallel", m_sequenceParallel->isChecked());
}

void ParallelFields::restore(const QSettings& settings)
{
    show(settings.value("tp", 1).toInt(), settings.value("pp", 1).toInt(),
        settings.value("virtualStages", 1).toInt(),
        settings.value("sequenceParallel", false).toBool());
}

void ParallelFields::updateEnabled()
{
    m_virtualStages->setEnabled(m_pp->value() > 1);
    m_sequenceParallel->setEnabled(m_tp->value() > 1);
}

} // namespace shard::widgets
