// The method and LoRA fields of the Plan and Launch pages (see lora_fields.h).
#include "widgets/lora_fields.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QSettings>
#include <QSpinBox>

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

    connect(m_method, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        updateEnabled();
        Q_EMIT changed();
    });
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
}

QList<QWidget*> LoraFields::widgets() const
{
    return {m_method, m_rank, m_alpha, m_dropout, m_targets, m_rslora, m_doubleQuant};
}

void LoraFields::updateEnabled()
{
    const QString method = m_method->currentData().toString();
    for (QWidget* w :
        std::initializer_list<QWidget*> {m_rank, m_alpha, m_dropout, m_targets, m_rslora})
        w->setEnabled(method != "full");
    m_doubleQuant->setEnabled(method == "qlora");
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
}

void LoraFields::writeTo(plan::PlanInput& in) const
{
    // Through the run spec's fields, so both take the same values.
    protocol::RunSpec s;
    writeTo(s);
    plan::applyLoraFieldsOf(s, in);
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
}

} // namespace shard::widgets
