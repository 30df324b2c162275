// The method and LoRA fields of the Plan and Launch pages (see lora_fields.h).
#include "widgets/lora_fields.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QSettings>
#include <QSpinBox>
#include <QStandardItemModel>

#include "plan/run_spec_bridge.h"

namespace shard::widgets {

LoraFields::LoraFields(QWidget* parent)
    : QObject(parent)
{
    const protocol::RunSpec defaults;
    m_method = new QComboBox(parent);
    m_method->setObjectName("method");
    m_method->addItem(tr("full fine-tuning"), "full");
    m_method->addItem(tr("LoRA (frozen base)"), "lora");
    m_method->addItem(tr("QLoRA (NF4 base)"), "qlora");
    m_method->setToolTip(tr("Full fine-tuning, LoRA adapters on a frozen base, or QLoRA (the "
                            "base's projections in 4-bit NF4)"));
    m_rank = new QSpinBox(parent);
    m_rank->setObjectName("loraRank");
    m_rank->setRange(1, 4096);
    m_rank->setValue(static_cast<int>(defaults.loraRank));
    m_alpha = new QDoubleSpinBox(parent);
    m_alpha->setObjectName("loraAlpha");
    m_alpha->setDecimals(3);
    m_alpha->setRange(0.001, 1e6);
    m_alpha->setValue(defaults.loraAlpha);
    m_alpha->setToolTip(tr("The adapter term is scaled by alpha / rank"));
    m_dropout = new QDoubleSpinBox(parent);
    m_dropout->setObjectName("loraDropout");
    m_dropout->setDecimals(3);
    m_dropout->setRange(0, 0.99);
    m_dropout->setSingleStep(0.05);
    m_dropout->setValue(defaults.loraDropout);
    m_targets = new QLineEdit(QString::fromStdString(defaults.loraTargets), parent);
    m_targets->setObjectName("loraTargets");
    m_targets->setToolTip(tr("Adapted projections: any of q,k,v,o,gate,up,down"));
    m_rslora = new QCheckBox(tr("Scale by alpha / √rank (rsLoRA)"), parent);
    m_rslora->setObjectName("loraRslora");
    m_rslora->setChecked(defaults.loraRslora);
    m_doubleQuant = new QCheckBox(tr("Double-quantise NF4 scales"), parent);
    m_doubleQuant->setObjectName("doubleQuant");
    m_doubleQuant->setChecked(defaults.qloraDoubleQuant);
    m_doubleQuant->setToolTip(tr("8-bit block scales instead of fp32 (bitsandbytes' double "
                                 "quantisation): about 0.37 bits less per base parameter"));

    m_objective = new QComboBox(parent);
    m_objective->setObjectName("objective");
    m_objective->addItem(tr("supervised (next token)"), "sft");
    m_objective->addItem(tr("DPO (preference pairs)"), "dpo");
    m_objective->addItem(tr("ORPO (pairs, no reference)"), "orpo");
    m_objective->setToolTip(tr("What the run optimises: the next-token loss on the labelled "
                               "tokens, or a preference between a chosen and a rejected answer "
                               "(data lines with prompt, chosen and rejected)"));
    m_dpoLoss = new QComboBox(parent);
    m_dpoLoss->setObjectName("dpoLoss");
    m_dpoLoss->addItem(tr("sigmoid (DPO)"), "sigmoid");
    m_dpoLoss->addItem(tr("IPO"), "ipo");
    m_dpoBeta = new QDoubleSpinBox(parent);
    m_dpoBeta->setObjectName("dpoBeta");
    m_dpoBeta->setDecimals(3);
    m_dpoBeta->setRange(0.001, 100);
    m_dpoBeta->setSingleStep(0.05);
    m_dpoBeta->setValue(defaults.dpoBeta);
    m_dpoBeta->setToolTip(tr("How far the policy may move from the reference: small values let "
                             "it move further (TRL's default 0.1)"));
    m_labelSmoothing = new QDoubleSpinBox(parent);
    m_labelSmoothing->setObjectName("dpoLabelSmoothing");
    m_labelSmoothing->setDecimals(3);
    m_labelSmoothing->setRange(0, 0.499);
    m_labelSmoothing->setSingleStep(0.05);
    m_labelSmoothing->setValue(defaults.dpoLabelSmoothing);
    m_labelSmoothing->setToolTip(tr("Conservative DPO: the fraction of preference labels assumed "
                                    "flipped (sigmoid loss only)"));
    m_dpoNllWeight = new QDoubleSpinBox(parent);
    m_dpoNllWeight->setObjectName("dpoNllWeight");
    m_dpoNllWeight->setDecimals(3);
    m_dpoNllWeight->setRange(0, 100);
    m_dpoNllWeight->setSingleStep(0.1);
    m_dpoNllWeight->setValue(defaults.dpoNllWeight);
    m_dpoNllWeight->setToolTip(tr("Adds this weight times the chosen answers' next-token loss "
                                  "(TRL's rpo_alpha): keeps them likely where the answers of a "
                                  "pair differ in a few tokens"));
    m_orpoLambda = new QDoubleSpinBox(parent);
    m_orpoLambda->setObjectName("orpoLambda");
    m_orpoLambda->setDecimals(3);
    m_orpoLambda->setRange(0, 100);
    m_orpoLambda->setSingleStep(0.05);
    m_orpoLambda->setValue(defaults.orpoLambda);
    m_orpoLambda->setToolTip(tr("Weight of ORPO's odds-ratio term beside the chosen answers' "
                                "next-token loss"));
    m_reference = new QComboBox(parent);
    m_reference->setObjectName("reference");
    m_reference->addItem(tr("automatic"), "auto");
    m_reference->addItem(tr("live (each step)"), "live");
    m_reference->addItem(tr("precomputed before training"), "precomputed");
    m_reference->setToolTip(tr("DPO's reference log-probabilities: live, a forward without "
                               "gradients each step (with LoRA/QLoRA the base with its adapters "
                               "off; with full fine-tuning a frozen copy of the model, sharded "
                               "like it); or precomputed, one pass over the data before training "
                               "(no copy). Automatic: live with LoRA/QLoRA, precomputed with full "
                               "fine-tuning"));

    connect(m_method, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        updateEnabled();
        Q_EMIT changed();
    });
    for (QComboBox* c : {m_objective, m_dpoLoss, m_reference})
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
            updateEnabled();
            Q_EMIT changed();
        });
    for (QDoubleSpinBox* s : {m_dpoBeta, m_labelSmoothing, m_dpoNllWeight, m_orpoLambda})
        connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &LoraFields::changed);
    connect(m_rank, qOverload<int>(&QSpinBox::valueChanged), this, &LoraFields::changed);
    for (QDoubleSpinBox* s : {m_alpha, m_dropout})
        connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &LoraFields::changed);
    connect(m_targets, &QLineEdit::textChanged, this, &LoraFields::changed);
    for (QCheckBox* b : {m_rslora, m_doubleQuant})
        connect(b, &QCheckBox::toggled, this, &LoraFields::changed);
    updateEnabled();
}

void LoraFields::addRows(QFormLayout* form) const
{
    form->addRow(tr("Me&thod"), m_method);
    form->addRow(tr("LoRA ran&k"), m_rank);
    form->addRow(tr("LoRA a&lpha"), m_alpha);
    form->addRow(tr("LoRA dr&opout"), m_dropout);
    form->addRow(tr("LoRA &targets"), m_targets);
    form->addRow(QString(), m_rslora);
    form->addRow(QString(), m_doubleQuant);
    form->addRow(tr("Ob&jective"), m_objective);
    form->addRow(tr("DPO loss"), m_dpoLoss);
    form->addRow(tr("DPO beta"), m_dpoBeta);
    form->addRow(tr("Label smoothing"), m_labelSmoothing);
    form->addRow(tr("DPO NLL weight"), m_dpoNllWeight);
    form->addRow(tr("ORPO lambda"), m_orpoLambda);
    form->addRow(tr("Reference"), m_reference);
}

QList<QWidget*> LoraFields::widgets() const
{
    return {m_method, m_rank, m_alpha, m_dropout, m_targets, m_rslora, m_doubleQuant, m_objective,
        m_dpoLoss, m_dpoBeta, m_labelSmoothing, m_orpoLambda, m_reference};
}

void LoraFields::updateEnabled()
{
    const QString method = m_method->currentData().toString();
    for (QWidget* w :
        std::initializer_list<QWidget*> {m_rank, m_alpha, m_dropout, m_targets, m_rslora})
        w->setEnabled(method != "full");
    m_doubleQuant->setEnabled(method == "qlora");
    const QString objective = m_objective->currentData().toString();
    const bool dpo = objective == "dpo";
    for (QWidget* w :
        std::initializer_list<QWidget*> {m_dpoLoss, m_dpoBeta, m_dpoNllWeight, m_reference})
        w->setEnabled(dpo);
    m_labelSmoothing->setEnabled(dpo && m_dpoLoss->currentData().toString() == "sigmoid");
    m_orpoLambda->setEnabled(objective == "orpo");
    // The engine's rule for a live reference (full fine-tuning's is refused under tensor or
    // pipeline parallel): the item is offered where the engine runs it.
    if (auto* model = qobject_cast<QStandardItemModel*>(m_reference->model())) {
        const int live = m_reference->findData("live");
        protocol::RunSpec probe;
        probe.objective = "dpo";
        probe.reference = "live";
        probe.method = method.toStdString();
        probe.tensorParallel = m_modelParallel ? 2 : 1; // any split refuses alike
        const bool offered = protocol::liveReferenceRefusal(probe).empty();
        if (QStandardItem* item = model->item(live))
            item->setEnabled(offered);
        if (!offered && m_reference->currentIndex() == live)
            m_reference->setCurrentIndex(m_reference->findData("auto"));
    }
}

void LoraFields::setModelParallel(bool on)
{
    if (on == m_modelParallel)
        return;
    m_modelParallel = on;
    updateEnabled();
}

QString LoraFields::objective() const
{
    return m_objective->currentData().toString();
}

void LoraFields::writeTo(protocol::RunSpec& spec) const
{
    spec.method = m_method->currentData().toString().toStdString();
    spec.loraRank = m_rank->value();
    spec.loraAlpha = m_alpha->value();
    spec.loraDropout = m_dropout->value();
    spec.loraTargets = m_targets->text().remove(' ').toStdString();
    spec.loraRslora = m_rslora->isChecked();
    spec.qloraDoubleQuant = m_doubleQuant->isChecked();
    spec.objective = m_objective->currentData().toString().toStdString();
    spec.dpoLoss = m_dpoLoss->currentData().toString().toStdString();
    spec.dpoBeta = m_dpoBeta->value();
    // Only what applies is written: the engine refuses smoothing with IPO and a reference
    // setting without DPO.
    spec.dpoLabelSmoothing = spec.dpoLoss == "sigmoid" ? m_labelSmoothing->value() : 0.0;
    spec.orpoLambda = m_orpoLambda->value();
    spec.dpoNllWeight = spec.objective == "dpo" ? m_dpoNllWeight->value() : 0.0;
    spec.reference
        = spec.objective == "dpo" ? m_reference->currentData().toString().toStdString() : "auto";
}

void LoraFields::writeTo(plan::PlanInput& in) const
{
    // Through the run spec's fields, so both take the same values.
    protocol::RunSpec s;
    writeTo(s);
    plan::applyLoraFieldsOf(s, in);
    in.objective = s.objective;
    in.reference = s.resolvedReference();
}

void LoraFields::show(const protocol::RunSpec& spec)
{
    const int i = m_method->findData(QString::fromStdString(spec.method));
    if (i >= 0)
        m_method->setCurrentIndex(i);
    m_rank->setValue(static_cast<int>(spec.loraRank));
    m_alpha->setValue(spec.loraAlpha);
    m_dropout->setValue(spec.loraDropout);
    m_targets->setText(QString::fromStdString(spec.loraTargets));
    m_rslora->setChecked(spec.loraRslora);
    m_doubleQuant->setChecked(spec.qloraDoubleQuant);
    for (const auto& [box, value] :
        {std::pair<QComboBox*, std::string> {m_objective, spec.objective},
            {m_dpoLoss, spec.dpoLoss}, {m_reference, spec.reference}})
        if (const int k = box->findData(QString::fromStdString(value)); k >= 0)
            box->setCurrentIndex(k);
    m_dpoBeta->setValue(spec.dpoBeta);
    m_labelSmoothing->setValue(spec.dpoLabelSmoothing);
    m_orpoLambda->setValue(spec.orpoLambda);
    m_dpoNllWeight->setValue(spec.dpoNllWeight);
}

void LoraFields::save(QSettings& s) const
{
    s.setValue("method", m_method->currentData());
    s.setValue("loraRank", m_rank->value());
    s.setValue("loraAlpha", m_alpha->value());
    s.setValue("loraDropout", m_dropout->value());
    s.setValue("loraTargets", m_targets->text());
    s.setValue("loraRslora", m_rslora->isChecked());
    s.setValue("doubleQuant", m_doubleQuant->isChecked());
    s.setValue("objective", m_objective->currentData());
    s.setValue("dpoLoss", m_dpoLoss->currentData());
    s.setValue("dpoBeta", m_dpoBeta->value());
    s.setValue("dpoLabelSmoothing", m_labelSmoothing->value());
    s.setValue("orpoLambda", m_orpoLambda->value());
    s.setValue("dpoNllWeight", m_dpoNllWeight->value());
    s.setValue("reference", m_reference->currentData());
}

void LoraFields::restore(const QSettings& s)
{
    const int i = m_method->findData(s.value("method"));
    if (i >= 0)
        m_method->setCurrentIndex(i);
    m_rank->setValue(s.value("loraRank", m_rank->value()).toInt());
    m_alpha->setValue(s.value("loraAlpha", m_alpha->value()).toDouble());
    m_dropout->setValue(s.value("loraDropout", m_dropout->value()).toDouble());
    m_targets->setText(s.value("loraTargets", m_targets->text()).toString());
    m_rslora->setChecked(s.value("loraRslora", m_rslora->isChecked()).toBool());
    m_doubleQuant->setChecked(s.value("doubleQuant", m_doubleQuant->isChecked()).toBool());
    for (const auto& [box, key] : {std::pair<QComboBox*, const char*> {m_objective, "objective"},
             {m_dpoLoss, "dpoLoss"}, {m_reference, "reference"}})
        if (const int k = box->findData(s.value(key)); k >= 0)
            box->setCurrentIndex(k);
    m_dpoBeta->setValue(s.value("dpoBeta", m_dpoBeta->value()).toDouble());
    m_labelSmoothing->setValue(s.value("dpoLabelSmoothing", m_labelSmoothing->value()).toDouble());
    m_orpoLambda->setValue(s.value("orpoLambda", m_orpoLambda->value()).toDouble());
    m_dpoNllWeight->setValue(s.value("dpoNllWeight", m_dpoNllWeight->value()).toDouble());
    updateEnabled();
}

} // namespace shard::widgets
