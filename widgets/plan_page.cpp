// PlanPage: form -> PlanInput -> planAllStrategies / largestMicroBatch / fewestGpus -> chart.
#include "widgets/plan_page.h"

#include <algorithm>
#include <cmath>

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QResizeEvent>
#include <QSaveFile>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

#include "jobs/format_bytes.h"
#include "jobs/result.h"
#include "plan/device_catalog.h"
#include "plan/layout_search.h"
#include "plan/run_spec_bridge.h"
#include "protocol/run_spec.h"
#include "widgets/background.h"
#include "widgets/lora_fields.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/message_bar.h"
#include "widgets/parallel_fields.h"

namespace shard::widgets {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
const char* const kCustomDevice = "custom";
const char* const kCpuDevice = "cpu";
constexpr int64_t kMicroBatchSearchLimit = 65536; // the micro-batch field's maximum

// One unit for a table of sizes, from its largest: GiB, or MiB / KiB where GiB would read 0.00.
struct TableUnit {
    double bytes;
    const char* name;
};
TableUnit tableUnitFor(double largestBytes)
{
    if (largestBytes >= kGiB)
        return {kGiB, "GiB"};
    if (largestBytes >= 1024.0 * 1024.0)
        return {1024.0 * 1024.0, "MiB"};
    return {1024.0, "KiB"};
}

QString unitNumber(double bytes, const TableUnit& unit)
{
    return QString::number(bytes / unit.bytes, 'f', 2);
}

// Bytes with two decimals, as `shard plan` prints them, in GiB or, where GiB would round to
// nothing, MiB or KiB (a tiny model's 20 MiB must not read "0.00 GiB").
QString gib(int64_t bytes)
{
    const double b = double(bytes);
    const double a = std::abs(b);
    if (a >= kGiB || a == 0)
        return QString::number(b / kGiB, 'f', 2) + " GiB";
    if (a >= 1024.0 * 1024.0)
        return QString::number(b / (1024.0 * 1024.0), 'f', 2) + " MiB";
    if (a >= 1024.0)
        return QString::number(b / 1024.0, 'f', 2) + " KiB";
    return QString::number(bytes) + " B";
}

// This machine's RAM in GiB, to the spin box's two decimals.
double thisMachineRamGiB()
{
    return std::round(double(plan::physicalMemoryBytes()) / kGiB * 100.0) / 100.0;
}

QString flops(double f)
{
    const char* units[] = {"", "K", "M", "G", "T", "P", "E"};
    int u = 0;
    while (f >= 1000.0 && u < 6) {
        f /= 1000.0;
        ++u;
    }
    return QString("%1 %2FLOP").arg(f, 0, 'f', f < 10 ? 2 : 1).arg(units[u]);
}

void addItems(QComboBox* box, const QStringList& values)
{
    for (const QString& v : values)
        box->addItem(v, v);
}

} // namespace

QStringList planCategoryNames()
{
    QStringList names;
    for (const plan::PlanComponent& c : plan::planComponents())
        names << QString::fromUtf8(c.label);
    return names;
}

QStringList planCategoryTips()
{
    // In planCategoryNames()'s order, then the total and the host rows (engine/plan/ACCOUNTING.md).
    QStringList tips;
    for (const plan::PlanComponent& c : plan::planComponents())
        tips << QString::fromUtf8(c.meaning);
    tips << QObject::tr("Everything above, per device.")
         << QObject::tr("Offloaded state in host memory per rank (masters, their gradients and "
                        "AdamW's moments; GPU runs with offload).");
    return tips;
}

std::optional<plan::PlanResult> planOfRunSpec(const nlohmann::json& runSpec)
{
    try {
        const protocol::RunSpec s = protocol::runSpecFromJson(runSpec);
        // Capacity does not change the prediction; only the kind of device does.
        const plan::PlanInput in
            = plan::planInputFromSpec(s, plan::defaultDeviceFor(s, int64_t(1) << 40));
        return plan::plan(in);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

std::optional<double> predictedBytesPerRank(const nlohmann::json& runSpec)
{
    if (const auto p = planOfRunSpec(runSpec))
        return double(p->perDevice.total());
    return std::nullopt;
}

std::vector<double> planCategoryBytes(const plan::MemoryBreakdown& m)
{
    std::vector<double> out;
    for (const auto& [key, bytes] : m.components())
        out.push_back(double(bytes));
    return out;
}

PlanPage::PlanPage(QWidget* parent)
    : QWidget(parent)
{
    m_modelBox = new QComboBox(this);
    m_modelBox->setObjectName("model");
    for (const auto& p : plan::presets())
        m_modelBox->addItem(QString::fromStdString(p.name), QString::fromStdString(p.name));
    m_openFolder = new QPushButton(tr("Open a Hugging Face &folder…"), this);
    m_modelInfo = new QLabel(this);
    m_modelInfo->setObjectName("modelInfo");
    m_modelInfo->setWordWrap(true);
    m_gpus = new QSpinBox(this);
    m_gpus->setObjectName("gpus");
    m_gpus->setRange(1, 1024);
    m_gpus->setValue(8);
    m_nodes = new QSpinBox(this);
    m_nodes->setObjectName("nodes");
    m_nodes->setRange(1, 4096);
    m_device = new QComboBox(this);
    m_device->setObjectName("device");
    for (const auto& d : plan::gpuCatalog()) {
        m_device->addItem(QString::fromStdString(d.label), QString::fromStdString(d.key));
        m_device->setItemData(m_device->count() - 1,
            tr("%1 GiB · %2 TFLOP/s bf16 dense · %3")
                .arg(double(d.spec.memoryBytes) / kGiB, 0, 'f', 0)
                .arg(d.spec.peakFlops16 / 1e12, 0, 'f', 0)
                .arg(QString::fromStdString(d.interconnect)),
            Qt::ToolTipRole);
    }
    m_device->addItem(tr("GPU, custom size"), kCustomDevice);
    m_device->addItem(tr("CPU (host memory)"), kCpuDevice);
    m_device->setCurrentIndex(m_device->findData("h100-80g"));
    m_hostGiB = new QDoubleSpinBox(this);
    m_hostGiB->setObjectName("hostGiB");
    m_hostGiB->setRange(0, 1 << 20);
    m_hostGiB->setDecimals(0);
    m_hostGiB->setSuffix(" GiB");
    m_hostGiB->setSpecialValueText(tr("not checked"));
    m_hostGiB->setValue(std::floor(double(plan::physicalMemoryBytes()) / kGiB)); // this machine
    m_hostGiB->setToolTip(tr("Host RAM per node: offloaded state must fit in it"));
    m_mode = new QComboBox(this);
    m_mode->setObjectName("mode");
    m_mode->addItem(tr("Shard Studio engine"), "engine");
    m_mode->addItem(tr("ZeRO paper (Rajbhandari et al.)"), "zero-paper");
    m_mode->addItem(tr("DeepSpeed (its partitioning and buckets)"), "deepspeed");
    m_mode->setItemData(m_mode->count() - 1,
        tr("What DeepSpeed itself holds: 16-bit parameters beside the fp32 master, its reduce "
           "and all-gather buckets (4.5x under overlap_comm), ZeRO-3's prefetch and live-"
           "parameter limits (an imported config's, else the Hugging Face Trainer's \"auto\" "
           "values) and the model's activations"),
        Qt::ToolTipRole);
    m_table = new QTableWidget(this);
    m_table->setObjectName("components");
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    // Columns as wide as their numbers (the table scrolls before a cell elides or wraps).
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setWordWrap(false);
    m_table->setTextElideMode(Qt::ElideNone);
    m_table->setMinimumHeight(150);
    m_customGiB = new QDoubleSpinBox(this);
    m_customGiB->setObjectName("customGiB");
    m_customGiB->setRange(1, 4096);
    m_customGiB->setValue(48);
    m_customGiB->setSuffix(" GiB");
    m_customGiB->setEnabled(false);
    m_strategy = new QComboBox(this);
    m_strategy->setObjectName("strategy");
    for (const auto& name : protocol::strategyNames())
        m_strategy->addItem(QString::fromStdString(name), QString::fromStdString(name));
    m_strategy->setCurrentIndex(3);
    m_shardGroup = new QSpinBox(this);
    m_shardGroup->setObjectName("shardGroup");
    m_shardGroup->setRange(1, 4096);
    m_shardGroup->setValue(8);
    m_shardGroup->setEnabled(false);
    // Tensor and pipeline parallelism: planned in the chosen accounting (this engine's, or the
    // ZeRO paper's as Megatron-LM and torchtitan run them), launched on this engine or exported
    // for torchtitan.
    m_parallel = new ParallelFields(this);
    m_precision = new QComboBox(this);
    m_precision->setObjectName("precision");
    addItems(m_precision, {"fp32", "bf16-mixed", "bf16", "fp16-mixed"});
    m_precision->setCurrentIndex(1);
    m_checkpointing = new QComboBox(this);
    m_checkpointing->setObjectName("checkpointing");
    addItems(m_checkpointing, {"none", "full"});
    m_offload = new QComboBox(this);
    m_offload->setObjectName("offload");
    addItems(m_offload, {"none", "optimizer", "params+optimizer"});
    m_reduceDtype = new QComboBox(this);
    m_reduceDtype->setObjectName("reduceDtype");
    for (const auto& d : protocol::reduceDtypes())
        m_reduceDtype->addItem(QString::fromStdString(d), QString::fromStdString(d));
    m_reduceDtype->setToolTip(tr("The gradients' reduce-scatter / all-reduce dtype under "
                                 "bf16-mixed: bf16 sends half the bytes and sums in bf16"));
    m_microBatch = new QSpinBox(this);
    m_microBatch->setObjectName("microBatch");
    m_microBatch->setRange(1, 65536);
    m_microBatch->setValue(1);
    m_seqLen = new QSpinBox(this);
    m_seqLen->setObjectName("seqLen");
    m_seqLen->setRange(1, 1 << 20);
    m_seqLen->setValue(4096);
    m_gradAccum = new QSpinBox(this);
    m_gradAccum->setObjectName("gradAccum");
    m_gradAccum->setRange(1, 65536);
    m_lora = new LoraFields(this);
    m_toLaunch = new QPushButton(tr("Launch with these settings →"), this);
    m_toLaunch->setObjectName("toLaunch");
    m_toLaunch->setEnabled(false); // until there is a plan
    m_recommendLayout = new QPushButton(tr("Recommend a la&yout"), this);
    m_recommendLayout->setObjectName("recommendLayout");
    m_recommendLayout->setToolTip(
        tr("Plan every tensor × pipeline layout of these GPUs (the ZeRO paper's accounting, the "
           "global batch kept) and set the fastest one that fits"));
    connect(m_recommendLayout, &QPushButton::clicked, this, &PlanPage::recommendLayout);
    m_importConfig = new QPushButton(tr("&Import a config…"), this);
    m_importConfig->setObjectName("importConfig");
    m_importConfig->setToolTip(tr("Plan a DeepSpeed JSON, an accelerate YAML or a torchtitan "
                                  "TOML: it sets the fields below"));
    m_export = new QToolButton(this);
    m_export->setObjectName("exportFor");
    m_export->setText(tr("&Export for…"));
    m_export->setToolTip(tr("Write this plan as a DeepSpeed, accelerate or torchtitan config, "
                            "a launch command or an sbatch script"));
    m_export->setPopupMode(QToolButton::InstantPopup);
    m_export->setEnabled(false); // until there is a plan
    {
        auto* menu = new QMenu(m_export);
        const std::pair<QString, QString> kinds[] = {{tr("DeepSpeed config (JSON)"), "deepspeed"},
            {tr("accelerate config (YAML)"), "accelerate"},
            {tr("torchtitan config (TOML)"), "torchtitan"}, {tr("torchrun command"), "torchrun"},
            {tr("deepspeed command"), "deepspeed-launch"},
            {tr("accelerate launch command"), "accelerate-launch"},
            {tr("sbatch script (srun torchrun)"), "sbatch"}};
        for (const auto& [label, kind] : kinds) {
            QAction* a = menu->addAction(label);
            a->setObjectName("export-" + kind);
            connect(a, &QAction::triggered, this, [this, k = kind] { showExport(k); });
        }
        m_export->setMenu(menu);
    }
    m_message = new MessageBar(this);
    m_chart = new MemoryBarChart(tr("Memory per device"), this);
    m_chart->setCategories(planCategoryNames());
    m_verdict = new QLabel(this);
    m_verdict->setObjectName("verdict");
    m_verdict->setWordWrap(true);
    QFont big = m_verdict->font();
    big.setPointSizeF(big.pointSizeF() * 1.25);
    big.setBold(true);
    m_verdict->setFont(big);
    m_details = new QLabel(this);
    m_details->setObjectName("details");
    m_details->setWordWrap(true);
    m_details->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_details->setAlignment(Qt::AlignTop | Qt::AlignLeft);

    auto* modelBox = new QGroupBox(tr("Model"), this);
    auto* modelForm = new QFormLayout(modelBox);
    modelForm->addRow(tr("&Preset"), m_modelBox);
    modelForm->addRow(m_openFolder);
    modelForm->addRow(m_importConfig);
    modelForm->addRow(m_modelInfo);
    auto* clusterBox = new QGroupBox(tr("Hardware"), this);
    auto* clusterForm = new QFormLayout(clusterBox);
    m_gpusLabel = new QLabel(tr("&GPUs per node"), this);
    m_gpusLabel->setBuddy(m_gpus);
    clusterForm->addRow(m_gpusLabel, m_gpus);
    clusterForm->addRow(tr("&Nodes"), m_nodes);
    clusterForm->addRow(tr("&Device"), m_device);
    m_memoryLabel = new QLabel(tr("Device &memory"), this);
    m_memoryLabel->setBuddy(m_customGiB);
    clusterForm->addRow(m_memoryLabel, m_customGiB);
    clusterForm->addRow(tr("&Host memory per node"), m_hostGiB);
    auto* trainBox = new QGroupBox(tr("Training"), this);
    auto* trainForm = new QFormLayout(trainBox);
    trainForm->addRow(tr("&Strategy"), m_strategy);
    trainForm->addRow(tr("Shard &group"), m_shardGroup);
    m_parallel->addRows(trainForm);
    trainForm->addRow(QString(), m_recommendLayout);
    trainForm->addRow(tr("P&recision"), m_precision);
    trainForm->addRow(tr("&Checkpointing"), m_checkpointing);
    trainForm->addRow(tr("O&ffload"), m_offload);
    trainForm->addRow(tr("Red&uce dtype"), m_reduceDtype);
    trainForm->addRow(tr("M&icro-batch"), m_microBatch);
    trainForm->addRow(tr("Se&quence length"), m_seqLen);
    trainForm->addRow(tr("Gradient &accumulation"), m_gradAccum);
    trainForm->addRow(tr("Acco&unting"), m_mode);
    m_lora->addRows(trainForm);

    auto* left = new QVBoxLayout;
    left->addWidget(modelBox);
    left->addWidget(clusterBox);
    left->addWidget(trainBox);
    left->addStretch(1);
    auto* leftWidget = new QWidget(this);
    leftWidget->setLayout(left);
    leftWidget->setMaximumWidth(400);
    // The form scrolls when the window is short (it is taller than the chart needs).
    auto* leftScroll = m_fields = new QScrollArea(this);
    leftScroll->setObjectName("planFieldsScroll");
    leftScroll->setWidget(leftWidget);
    leftScroll->setWidgetResizable(true);
    leftScroll->setFrameShape(QFrame::NoFrame);
    leftScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    leftScroll->setMinimumWidth(
        leftWidget->sizeHint().width() + leftScroll->verticalScrollBar()->sizeHint().width());
    leftScroll->setMaximumWidth(400 + leftScroll->verticalScrollBar()->sizeHint().width());

    auto* right = new QVBoxLayout;
    right->addWidget(m_message);
    right->addWidget(m_verdict);
    // Chart and table side by side on a wide window, the table under the chart on a narrow one
    // (resizeEvent).
    m_chartRow = new QBoxLayout(QBoxLayout::LeftToRight);
    m_chartRow->addWidget(m_chart, 3);
    m_chartRow->addWidget(m_table, 2);
    right->addLayout(m_chartRow, 2);
    // The details (and a 3D plan's notes) scroll rather than overlap the table on a short window.
    auto* detailsScroll = new QScrollArea(this);
    detailsScroll->setObjectName("planDetailsScroll");
    detailsScroll->setWidget(m_details);
    detailsScroll->setWidgetResizable(true);
    detailsScroll->setFrameShape(QFrame::NoFrame);
    detailsScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    detailsScroll->setMinimumHeight(4 * fontMetrics().lineSpacing());
    right->addWidget(detailsScroll, 1);
    auto* actions = new QHBoxLayout;
    actions->addStretch(1);
    actions->addWidget(m_export);
    actions->addWidget(m_toLaunch);
    right->addLayout(actions);

    auto* layout = new QHBoxLayout(this);
    layout->addWidget(leftScroll);
    layout->addLayout(right, 1);

    // Tab order follows the form top to bottom.
    QList<QWidget*> order = {m_modelBox, m_openFolder, m_importConfig, m_gpus, m_nodes, m_device,
        m_customGiB, m_hostGiB, m_strategy, m_shardGroup};
    order << m_parallel->widgets()
          << QList<QWidget*> {m_precision, m_checkpointing, m_offload, m_reduceDtype, m_microBatch,
                 m_seqLen, m_gradAccum, m_mode}
          << m_lora->widgets() << m_export << m_toLaunch;
    for (qsizetype i = 1; i < order.size(); ++i)
        setTabOrder(order[i - 1], order[i]);

    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(30);
    connect(m_debounce, &QTimer::timeout, this, &PlanPage::recompute);
    connect(m_modelBox, qOverload<int>(&QComboBox::activated), this,
        [this] { setModel(m_modelBox->currentData().toString()); });
    connect(m_openFolder, &QPushButton::clicked, this, &PlanPage::browseFolder);
    connect(m_importConfig, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this,
            tr("Import a DeepSpeed, accelerate or torchtitan config"), QString(),
            tr("Engine configs (*.json *.yaml *.yml *.toml);;All files (*)"));
        if (!path.isEmpty())
            importConfig(path);
    });
    connect(m_toLaunch, &QPushButton::clicked, this, [this] {
        if (m_input)
            Q_EMIT launchRequested(*m_input, m_modelSource);
    });
    connect(m_lora, &LoraFields::changed, this, &PlanPage::scheduleRecompute);
    for (QSpinBox* s : {m_gpus, m_nodes, m_shardGroup, m_microBatch, m_seqLen, m_gradAccum})
        connect(s, qOverload<int>(&QSpinBox::valueChanged), this, &PlanPage::scheduleRecompute);
    connect(m_parallel, &ParallelFields::changed, this, &PlanPage::scheduleRecompute);
    // Full fine-tuning's live DPO reference is not offered under tensor or pipeline parallel.
    connect(m_parallel, &ParallelFields::changed, m_lora, [this] {
        m_lora->setModelParallel(
            m_parallel->tensorParallel() > 1 || m_parallel->pipelineStages() > 1);
    });
    for (QDoubleSpinBox* s : {m_customGiB, m_hostGiB})
        connect(s, qOverload<double>(&QDoubleSpinBox::valueChanged), this,
            &PlanPage::scheduleRecompute);
    for (QComboBox* c :
        {m_device, m_strategy, m_precision, m_checkpointing, m_offload, m_reduceDtype, m_mode})
        connect(
            c, qOverload<int>(&QComboBox::currentIndexChanged), this, &PlanPage::scheduleRecompute);
    // The planner refuses a bf16 reduce where the precision has no choice.
    auto reduceChoice = [this] {
        m_reduceDtype->setEnabled(
            protocol::hasReduceDtypeChoice(m_precision->currentData().toString().toStdString()));
    };
    connect(m_precision, qOverload<int>(&QComboBox::currentIndexChanged), this, reduceChoice);
    reduceChoice();
    connect(m_device, qOverload<int>(&QComboBox::currentIndexChanged), this,
        &PlanPage::showDeviceMemory);
    // What the user types is kept per kind of device: a custom GPU's size, or the RAM of a CPU
    // node when it is not this machine's.
    connect(m_customGiB, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this](double v) {
        const QString d = m_device->currentData().toString();
        if (d == kCustomDevice)
            m_gpuCustomGiB = v;
        else if (d == kCpuDevice)
            m_cpuRamGiB = std::abs(v - thisMachineRamGiB()) < 0.005 ? 0.0 : v;
    });
    connect(m_strategy, qOverload<int>(&QComboBox::currentIndexChanged), this,
        [this] { m_shardGroup->setEnabled(m_strategy->currentData().toString() == "hybrid"); });

    // The catalogue card chosen above shows its memory in the (greyed) size field.
    showDeviceMemory();
    setModel("llama-2-7b");
}

void PlanPage::showDeviceMemory()
{
    const QString d = m_device->currentData().toString();
    const bool cpu = d == kCpuDevice;
    m_customGiB->setEnabled(d == kCustomDevice || cpu);
    m_hostGiB->setEnabled(!cpu);
    m_memoryLabel->setText(cpu ? tr("RAM per &node") : tr("Device &memory"));
    m_gpusLabel->setText(cpu ? tr("&Ranks per node") : tr("&GPUs per node"));
    m_customGiB->setToolTip(cpu ? tr("The RAM of one node, shared by its ranks: each rank's "
                                     "capacity is this divided by the ranks per node (this "
                                     "machine: %1)")
                                      .arg(gib(plan::physicalMemoryBytes()))
                                : tr("The memory of one GPU"));
    // Shown, not typed: a card's own memory (greyed), the custom GPU's size, the CPU node's RAM
    // (this machine's unless the user typed another), never the previous device's.
    const QSignalBlocker block(m_customGiB);
    if (auto card = plan::findCatalogDevice(d.toStdString()))
        m_customGiB->setValue(double(card->spec.memoryBytes) / kGiB);
    else if (cpu)
        m_customGiB->setValue(m_cpuRamGiB > 0 ? m_cpuRamGiB : thisMachineRamGiB());
    else
        m_customGiB->setValue(m_gpuCustomGiB);
}

void PlanPage::useHostGpus(const QString& gpuName, double memoryMiB, int count)
{
    const auto card = plan::catalogDeviceForGpu(gpuName.toStdString(), memoryMiB);
    if (card) {
        m_device->setCurrentIndex(m_device->findData(QString::fromStdString(card->key)));
    } else {
        m_device->setCurrentIndex(m_device->findData(kCustomDevice));
        if (memoryMiB > 0)
            m_customGiB->setValue(memoryMiB / 1024.0);
    }
    m_gpus->setValue(std::max(1, count));
    m_message->showMessage(card ? tr("Planning for %1 × %2 (%3).")
                                      .arg(count)
                                      .arg(gpuName, QString::fromStdString(card->label))
                                : tr("Planning for %1 × %2: not in the GPU catalogue, so as a "
                                     "custom GPU of %3 GiB (its speed is not known).")
                                      .arg(count)
                                      .arg(gpuName)
                                      .arg(memoryMiB / 1024.0, 0, 'f', 0),
        MessageBar::Kind::Info);
    scheduleRecompute();
}

QString PlanPage::modelName() const
{
    return m_model ? QString::fromStdString(m_model->name) : QString();
}

QString PlanPage::verdictText() const
{
    return m_verdict->text();
}

QString PlanPage::messageText() const
{
    return m_message->text();
}

void PlanPage::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    // Side by side the chart and the table each need about 360 px; below that the title is cut
    // and the table's numbers elide, so the table goes under the chart.
    const int right = event->size().width() - m_fields->maximumWidth();
    const auto direction = right < 760 ? QBoxLayout::TopToBottom : QBoxLayout::LeftToRight;
    if (m_chartRow->direction() != direction)
        m_chartRow->setDirection(direction);
}

void PlanPage::setModel(const QString& presetOrFolder)
{
    const std::string source = presetOrFolder.toStdString();
    if (auto preset = plan::findPreset(source)) {
        m_model = *preset;
        m_modelSource = presetOrFolder;
        m_modelError.clear();
        const int index = m_modelBox->findData(presetOrFolder);
        if (index >= 0)
            m_modelBox->setCurrentIndex(index);
        m_message->clearMessage();
        showModelInfo();
        Q_EMIT modelLoaded(presetOrFolder);
        scheduleRecompute();
        return;
    }
    // A folder: read config.json off the UI thread.
    m_message->showMessage(tr("Reading %1…").arg(presetOrFolder), MessageBar::Kind::Info);
    runInBackground(
        this,
        [source]() -> jobs::Result<plan::ModelSpec> {
            try {
                return plan::resolveModel(source);
            } catch (const std::exception& e) {
                return jobs::fail(QString::fromUtf8(e.what()));
            }
        },
        [this, presetOrFolder](jobs::Result<plan::ModelSpec> result) {
            if (!result) {
                m_modelError = tr("Cannot use this model: %1").arg(result.error());
                m_message->showMessage(m_modelError);
                Q_EMIT modelFailed(result.error());
                return;
            }
            m_model = std::move(result).value();
            m_modelSource = presetOrFolder;
            m_modelError.clear();
            // The box names what is planned: the folder, not the last preset.
            int index = m_modelBox->findData(presetOrFolder);
            if (index < 0) {
                m_modelBox->insertItem(
                    0, tr("Folder: %1").arg(QDir(presetOrFolder).dirName()), presetOrFolder);
                m_modelBox->setItemData(0, presetOrFolder, Qt::ToolTipRole);
                index = 0;
            }
            m_modelBox->setCurrentIndex(index);
            showModelInfo();
            m_message->clearMessage();
            Q_EMIT modelLoaded(presetOrFolder);
            scheduleRecompute();
        });
}

void PlanPage::browseFolder()
{
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Open a Hugging Face model folder (with config.json)"));
    if (!dir.isEmpty())
        setModel(dir);
}

bool PlanPage::importConfig(const QString& path)
{
    QString error;
    auto fields = readFields(&error);
    if (!fields) {
        m_message->showMessage(error);
        return false;
    }
    const QString ext = QFileInfo(path).suffix().toLower();
    plan::EngineConfigKind kind = plan::EngineConfigKind::DeepSpeed;
    if (ext == "yaml" || ext == "yml")
        kind = plan::EngineConfigKind::Accelerate;
    else if (ext == "toml")
        kind = plan::EngineConfigKind::Torchtitan;
    else if (ext != "json") {
        m_message->showMessage(tr("%1: not a config this page reads (a DeepSpeed .json, an "
                                  "accelerate .yaml or a torchtitan .toml)")
                                   .arg(path));
        return false;
    }
    // The page's fields fill what the config leaves open ("auto", the GPUs of a DeepSpeed or
    // torchtitan config); accelerate's num_processes decides the GPUs itself.
    plan::ConfigContext ctx;
    ctx.base = *fields;
    ctx.gpusGiven = kind != plan::EngineConfigKind::Accelerate;
    ctx.modelGiven = kind != plan::EngineConfigKind::Torchtitan;
    plan::ImportedConfig c;
    try {
        try {
            c = plan::readEngineConfig(kind, path.toStdString(), ctx);
        } catch (const std::exception& e) {
            // A torchtitan model the planner has no preset for: the page's model.
            if (kind != plan::EngineConfigKind::Torchtitan
                || std::string(e.what()).find("pass --model") == std::string::npos)
                throw;
            ctx.modelGiven = true;
            c = plan::readEngineConfig(kind, path.toStdString(), ctx);
        }
    } catch (const std::exception& e) {
        m_message->showMessage(tr("Cannot import: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
    const plan::PlanInput& in = c.input;
    if (in.model.name != fields->model.name)
        setModel(QString::fromStdString(in.model.name));
    auto setData = [](QComboBox* box, const std::string& value) {
        const int i = box->findData(QString::fromStdString(value));
        if (i >= 0)
            box->setCurrentIndex(i);
    };
    m_gpus->setValue(int(in.gpusPerNode));
    m_nodes->setValue(int(in.nodes));
    if (in.device.kind == plan::DeviceKind::Cpu)
        setData(m_device, kCpuDevice);
    setData(m_strategy, plan::toString(in.strategy));
    if (in.strategy == plan::Strategy::Hybrid)
        m_shardGroup->setValue(int(in.shardGroup));
    setData(m_precision, plan::toString(in.precision));
    setData(m_checkpointing, plan::toString(in.checkpointing));
    setData(m_offload, plan::toString(in.offload));
    setData(m_reduceDtype, in.bf16Reduce ? "bf16" : "fp32");
    m_microBatch->setValue(int(in.microBatch));
    m_seqLen->setValue(int(in.seqLen));
    m_gradAccum->setValue(int(in.gradAccum));
    m_parallel->show(in);
    if (in.threeD())
        setData(m_mode, "zero-paper");
    if (c.usesDeepSpeed) {
        m_importedDeepSpeed = c.deepspeed;
        setData(m_mode, "deepspeed");
    } else {
        m_importedDeepSpeed.reset();
        if (m_mode->currentData().toString() == "deepspeed")
            setData(m_mode, "engine");
    }
    m_importedPath = path;
    QStringList lines;
    lines << tr("Imported %1 (%2).")
                 .arg(QFileInfo(path).fileName(), QString::fromStdString(plan::toString(c.kind)));
    QStringList resolved;
    for (const auto& [k, v] : c.resolved)
        resolved << QString::fromStdString(k + " = " + v);
    if (!resolved.isEmpty())
        lines << tr("Resolved: %1.").arg(resolved.join("; "));
    QStringList left;
    for (const auto& n : c.notModelled)
        left << QString::fromStdString(n);
    if (!left.isEmpty())
        lines << tr("Not modelled: %1.").arg(left.join("; "));
    for (const auto& w : c.warnings)
        lines << tr("Warning: %1").arg(QString::fromStdString(w));
    m_message->showMessage(lines.join('\n'), MessageBar::Kind::Info);
    scheduleRecompute();
    return true;
}

plan::ExportedConfig PlanPage::exportFor(const QString& kind) const
{
    if (!m_input)
        return {};
    try {
        return plan::exportFor(*m_input, kind.toStdString());
    } catch (const std::exception&) {
        return {}; // not a kind the menu offers
    }
}

void PlanPage::showExport(const QString& kind)
{
    const plan::ExportedConfig e = exportFor(kind);
    if (e.text.empty())
        return;
    auto* dialog = new QDialog(this);
    dialog->setObjectName("exportDialog");
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setWindowTitle(tr("Export for %1").arg(kind));
    auto* layout = new QVBoxLayout(dialog);
    if (!e.notExpressed.empty()) {
        QStringList lines;
        for (const auto& n : e.notExpressed)
            lines << QStringLiteral("• ") + QString::fromStdString(n).toHtmlEscaped();
        auto* notes = new QLabel(
            tr("<b>Not in this file</b> (the target cannot say it, or it is the script's):<br>%1")
                .arg(lines.join("<br>")),
            dialog);
        notes->setObjectName("exportNotes");
        notes->setWordWrap(true);
        layout->addWidget(notes);
    }
    auto* text = new QPlainTextEdit(QString::fromStdString(e.text), dialog);
    text->setObjectName("exportText");
    text->setReadOnly(true);
    text->setLineWrapMode(QPlainTextEdit::NoWrap);
    QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    text->setFont(mono);
    layout->addWidget(text, 1);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, dialog);
    QPushButton* save = buttons->addButton(tr("&Save…"), QDialogButtonBox::ActionRole);
    QPushButton* copy = buttons->addButton(tr("&Copy"), QDialogButtonBox::ActionRole);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::rejected, dialog, &QDialog::close);
    connect(copy, &QPushButton::clicked, dialog,
        [text] { QApplication::clipboard()->setText(text->toPlainText()); });
    const QString suggested = kind == "deepspeed" ? "ds_config.json"
        : kind == "accelerate"                    ? "accelerate.yaml"
        : kind == "torchtitan"                    ? "train_config.toml"
        : kind == "sbatch"                        ? "job.sbatch"
                                                  : "launch.sh";
    connect(save, &QPushButton::clicked, dialog, [dialog, text, suggested] {
        const QString path = QFileDialog::getSaveFileName(dialog, tr("Save the export"), suggested);
        if (path.isEmpty())
            return;
        QSaveFile f(path);
        if (!f.open(QIODevice::WriteOnly) || f.write(text->toPlainText().toUtf8()) < 0
            || !f.commit())
            text->appendPlainText(tr("\n# could not save %1: %2").arg(path, f.errorString()));
    });
    dialog->resize(720, 520);
    dialog->show();
}

void PlanPage::scheduleRecompute()
{
    m_debounce->start();
}

void PlanPage::recommendLayout()
{
    QString error;
    const std::optional<plan::PlanInput> in = readFields(&error);
    if (!in) {
        m_message->showMessage(error);
        return;
    }
    plan::LayoutRecommendation rec;
    try {
        rec = plan::recommendLayout(*in);
    } catch (const std::exception& e) {
        m_message->showMessage(QString::fromUtf8(e.what()));
        return;
    }
    const QString reason = QString::fromStdString(rec.reason);
    if (rec.best < 0) {
        m_message->showMessage(reason);
        return;
    }
    const plan::LayoutCandidate& best = rec.candidates[size_t(rec.best)];
    // The recommendation is a 1F1B layout, with sequence parallel where its plan has it.
    m_parallel->show(best.plan->input);
    m_gradAccum->setValue(int(best.gradAccum));
    if (best.tp * best.pp > 1)
        m_mode->setCurrentIndex(m_mode->findData("zero-paper"));
    m_message->showMessage(tr("Recommended for %1 GPUs at a global batch of %2 sequences: %3")
                               .arg(rec.gpus)
                               .arg(rec.globalBatch)
                               .arg(reason),
        MessageBar::Kind::Info);
    scheduleRecompute();
}

std::optional<plan::PlanInput> PlanPage::readFields(QString* error) const
{
    if (!m_model) {
        *error = tr("Choose a model first.");
        return std::nullopt;
    }
    plan::PlanInput in;
    in.model = *m_model;
    try {
        in.strategy = plan::parseStrategy(m_strategy->currentData().toString().toStdString());
        in.precision = plan::parsePrecision(m_precision->currentData().toString().toStdString());
        in.checkpointing
            = plan::parseCheckpointing(m_checkpointing->currentData().toString().toStdString());
        in.offload = plan::parseOffload(m_offload->currentData().toString().toStdString());
        in.bf16Reduce
            = m_reduceDtype->isEnabled() && m_reduceDtype->currentData().toString() == "bf16";
        m_lora->writeTo(in);
    } catch (const std::exception& e) {
        *error = QString::fromUtf8(e.what());
        return std::nullopt;
    }
    in.shardGroup = in.strategy == plan::Strategy::Hybrid ? m_shardGroup->value() : 0;
    m_parallel->writeTo(in);
    in.microBatch = m_microBatch->value();
    in.seqLen = m_seqLen->value();
    in.gradAccum = m_gradAccum->value();
    in.gpusPerNode = m_gpus->value();
    in.nodes = m_nodes->value();
    const QString device = m_device->currentData().toString();
    if (device == kCpuDevice)
        // This machine's RAM to the byte, as `shard plan` and the Launch page count it.
        in.device = plan::DeviceSpec::cpu(
            m_cpuRamGiB > 0 ? int64_t(m_cpuRamGiB * kGiB) : plan::physicalMemoryBytes());
    else if (device == kCustomDevice)
        in.device = plan::DeviceSpec::gpu(m_customGiB->value());
    else if (auto card = plan::findCatalogDevice(device.toStdString()))
        in.device = card->spec;
    if (in.device.kind == plan::DeviceKind::Gpu)
        in.device.hostMemoryBytes = int64_t(m_hostGiB->value() * kGiB);
    try {
        const QString mode = m_mode->currentData().toString();
        // DeepSpeed's accounting is planned apart (recompute); the input is the engine's.
        in.mode = mode == "deepspeed" ? plan::AccountingMode::Engine
                                      : plan::parseAccountingMode(mode.toStdString());
    } catch (const std::exception& e) {
        *error = QString::fromUtf8(e.what());
        return std::nullopt;
    }
    return in;
}

void PlanPage::recompute()
{
    m_debounce->stop();
    QString error;
    auto in = readFields(&error);
    if (!in) {
        m_message->showMessage(error);
        return;
    }
    try {
        plan::validate(*in);
        m_results = plan::planAllStrategies(*in);
        if (m_mode->currentData().toString() == "deepspeed") {
            // Each strategy as DeepSpeed lays it out (ddp = stage 0, hybrid = MiCS), with an
            // imported config's buckets and knobs.
            for (plan::PlanResult& r : m_results) {
                const plan::DeepSpeedSettings ds = m_importedDeepSpeed
                    ? plan::deepSpeedSettingsFor(r.input, *m_importedDeepSpeed)
                    : plan::deepSpeedSettingsFor(r.input);
                r = plan::planDeepSpeed(r.input, ds);
            }
            const plan::DeepSpeedSettings ds = m_importedDeepSpeed
                ? plan::deepSpeedSettingsFor(*in, *m_importedDeepSpeed)
                : plan::deepSpeedSettingsFor(*in);
            m_largestMicroBatch = plan::largestMicroBatchDeepSpeed(*in, ds, kMicroBatchSearchLimit);
            m_fewestGpus = 0; // not searched under DeepSpeed's accounting
        } else {
            m_largestMicroBatch = plan::largestMicroBatch(*in, kMicroBatchSearchLimit);
            m_fewestGpus = plan::fewestGpus(*in);
        }
    } catch (const std::exception& e) {
        m_results.clear();
        m_input.reset();
        m_chart->setBars({});
        m_table->clear();
        m_table->setRowCount(0);
        m_table->setColumnCount(0);
        m_verdict->setText(tr("No plan"));
        m_verdict->setStyleSheet(QString());
        m_details->clear();
        m_toLaunch->setEnabled(false); // nothing to launch with
        m_export->setEnabled(false);
        m_message->showMessage(QString::fromUtf8(e.what()));
        Q_EMIT planChanged();
        return;
    }
    m_input = in;
    // Tensor and pipeline layouts launch too (the engine trains them); what a layout cannot
    // train on a model (the Launch page's preflight, the worker's refusal) is said there.
    m_toLaunch->setEnabled(true);
    m_toLaunch->setToolTip(in->threeD()
            ? tr("The Launch page gets this layout (tensor parallel %1, pipeline stages %2) "
                 "with the rest of the plan")
                  .arg(in->tp)
                  .arg(in->pp)
            : QString());
    m_export->setEnabled(true);
    // A model that failed to load stays reported; the plan shown is the previous model's. An
    // imported config's summary stays until the next import.
    if (!m_modelError.isEmpty())
        m_message->showMessage(m_modelError);
    else if (m_importedPath.isEmpty())
        m_message->clearMessage();
    showResults();
    Q_EMIT planChanged();
}

const plan::PlanResult* PlanPage::chosen() const
{
    if (!m_input)
        return nullptr;
    for (const auto& r : m_results)
        if (r.input.strategy == m_input->strategy)
            return &r;
    return nullptr;
}

void PlanPage::showResults()
{
    std::vector<MemoryBar> bars;
    for (const auto& r : m_results) {
        MemoryBar bar;
        bar.label = QString::fromStdString(plan::toString(r.input.strategy));
        if (r.input.strategy == plan::Strategy::Hybrid)
            bar.label += QString(" (%1)").arg(r.shardDegree);
        bar.bytes = planCategoryBytes(r.perDevice);
        bar.highlighted = r.input.strategy == m_input->strategy;
        bars.push_back(std::move(bar));
    }
    m_chart->setBars(bars);
    fillTable();
    const plan::PlanResult* c = chosen();
    if (!c) {
        m_verdict->setText(tr("No plan for this strategy"));
        return;
    }
    m_chart->setCapacity(double(c->capacityBytes), gib(c->capacityBytes));
    const QString strategy = QString::fromStdString(plan::toString(c->input.strategy));
    const double share
        = c->capacityBytes > 0 ? double(c->perDevice.total()) / double(c->capacityBytes) : 0.0;
    const bool tight = c->fits && share > plan::kSafeMemoryFraction;
    // On the CPU a rank's capacity is its share of the node's RAM (as `shard plan` and the
    // Launch page count it).
    const QString capacity = c->input.device.kind == plan::DeviceKind::Cpu
        ? tr("%1 per rank (%2 of RAM ÷ %n rank(s) per node)", "", int(c->input.gpusPerNode))
              .arg(gib(c->capacityBytes), gib(c->input.device.memoryBytes))
        : tr("%1 per device").arg(gib(c->capacityBytes));
    if (tight)
        m_verdict->setText(tr("⚠ Fits, but tight: %1 uses %2 of %3 (%4%); plans over %5% of "
                              "device memory risk running out")
                               .arg(strategy, gib(c->perDevice.total()), capacity)
                               .arg(qRound(share * 100))
                               .arg(qRound(plan::kSafeMemoryFraction * 100)));
    else if (c->fits)
        m_verdict->setText(
            tr("✔ Fits: %1 uses %2 of %3; %4 free")
                .arg(strategy, gib(c->perDevice.total()), capacity, gib(c->headroomBytes)));
    else if (c->headroomBytes >= 0)
        m_verdict->setText(tr("✘ Does not fit: %1 needs %2 of host memory per node for offloaded "
                              "state, the node has %3")
                               .arg(strategy, gib(c->hostBytesPerDevice * c->input.gpusPerNode),
                                   gib(c->input.device.hostMemoryBytes)));
    else
        m_verdict->setText(tr("✘ Does not fit: %1 needs %2, the capacity is %3")
                               .arg(strategy, gib(c->perDevice.total()), capacity)
            + suggestionsFor(*c));
    m_verdict->setStyleSheet(tight ? "color: #9a6700;"
            : c->fits              ? "color: #1d7a2e;"
                                   : "color: #b3261e;");

    QStringList lines;
    if (c->input.threeD())
        lines << tr("<b>%1</b>: %2 parameters · %3 GPUs as %4; %5 parameters per GPU "
                    "(pipeline stage %6's slice), the pipeline idle %7% of a step")
                     .arg(QString::fromStdString(m_model->name).toHtmlEscaped())
                     .arg(QLocale().toString(qlonglong(c->params)))
                     .arg(c->worldSize)
                     .arg(QString::fromStdString(c->input.mesh().describe()))
                     .arg(QLocale().toString(qlonglong(c->stageParams)))
                     .arg(c->peakStage)
                     .arg(qRound(c->bubbleFraction * 100.0));
    else
        lines << tr("<b>%1</b>: %2 parameters · %3 ranks (shard degree %4 × %5 replicas)")
                     .arg(QString::fromStdString(m_model->name).toHtmlEscaped())
                     .arg(QLocale().toString(qlonglong(c->params)))
                     .arg(c->worldSize)
                     .arg(c->shardDegree)
                     .arg(c->replicas);
    // The search stops at kMicroBatchSearchLimit: reaching it means memory sets no limit, not
    // that the number is one to use (a tiny model "fitting 65536").
    const QString largest = m_largestMicroBatch >= kMicroBatchSearchLimit
        ? tr("not limited by memory (%1 or more)").arg(kMicroBatchSearchLimit)
        : m_largestMicroBatch > 0 ? QString::number(m_largestMicroBatch)
                                  : tr("none (even 1 does not fit)");
    lines << tr("Largest micro-batch that fits: <b>%1</b> · fewest GPUs that fit: <b>%2</b>")
                 .arg(largest)
                 .arg(m_mode->currentData().toString() == "deepspeed"
                         ? tr("not searched under DeepSpeed's accounting")
                         : m_fewestGpus > 0 ? QString::number(m_fewestGpus)
                                            : tr("none"));
    lines << tr("FLOPs: %1 per token, %2 per step (%3 tokens) · communication: %4 sent per "
                "device per step (gathers %5, reductions %6%7)")
                 .arg(flops(c->flopsPerToken), flops(c->flopsPerStep))
                 .arg(QLocale().toString(qlonglong(c->tokensPerStep)))
                 .arg(gib(c->bytesSentPerDevicePerStep), gib(c->gatherBytesPerDevicePerStep),
                     gib(c->reduceBytesPerDevicePerStep),
                     c->input.threeD() ? tr(", tensor parallel %1, pipeline %2")
                                             .arg(gib(c->tpBytesPerDevicePerStep),
                                                 gib(c->ppBytesPerDevicePerStep))
                                       : QString());
    lines << tr("Roofline step time %1 s (compute %2 s, communication %3 s) · ~%4 tokens/s")
                 .arg(c->stepSeconds, 0, 'f', 3)
                 .arg(c->computeSeconds, 0, 'f', 3)
                 .arg(c->commSeconds, 0, 'f', 3)
                 .arg(QLocale().toString(qlonglong(c->tokensPerSecond)));
    if (c->hostBytesPerDevice > 0)
        lines << tr("Offloaded to host memory: %1 per rank").arg(gib(c->hostBytesPerDevice));
    lines << memoryExplanation(*c);
    if (c->checkpointBytes > 0) {
        // What the Monitor then measures; the interval is the run's --checkpoint-every.
        QString line = tr("Checkpoint: %1 on disk (%2 written per rank: fp32 weights and AdamW "
                          "state of what is trained)")
                           .arg(gib(c->checkpointBytes), gib(c->checkpointBytesPerRank));
        if (c->stepSeconds > 0)
            line += tr(" · every 100 steps puts ~%1 of training at risk at the roofline step time")
                        .arg(jobs::formatDuration(100.0 * c->stepSeconds));
        lines << line;
    }
    for (const auto& note : c->notes)
        lines << tr("Note: %1").arg(QString::fromStdString(note).toHtmlEscaped());
    m_details->setText(lines.join("<br>"));
    showModelInfo();
}

QString PlanPage::memoryExplanation(const plan::PlanResult& c) const
{
    // Why the numbers are what they are: the accounting, the moment of the peak, the overhead.
    const plan::PlanInput& in = c.input;
    const QString mode = m_mode->currentData().toString();
    const bool gpu = in.device.kind == plan::DeviceKind::Gpu;
    QString text = mode == QLatin1String("deepspeed")
        ? tr("Memory: DeepSpeed's accounting (its flat partitions, buckets and fp32 gradient "
             "partitions, as DeepSpeed would hold them; not this engine's)")
        : in.mode == plan::AccountingMode::Engine
        ? tr("Memory: this engine's accounting (what a run of it allocates: within 0.3% of its "
             "CPU runs%1; hover a row of the table for what it holds)")
              .arg(gpu ? tr(", not yet measured on a GPU") : QString())
        : tr("Memory: the ZeRO paper's accounting (model states (2+2+K)Ψ sharded by stage, "
             "Megatron's s·b·h·(34 + 5·a·s/h) activations per layer): textbook figures, not "
             "this engine's (choose the Shard Studio engine accounting for what a run of it "
             "holds)");
    if (!c.peakPhase.empty())
        text += tr(" · peak at <b>%1</b> of a step%2")
                    .arg(QString::fromStdString(c.peakPhase).toHtmlEscaped(),
                        c.peakPhase == "backward end"
                            ? tr(" (the activations are freed by then; the gradients wait for "
                                 "their reduce)")
                            : c.peakPhase == "backward start"
                            ? tr(" (before any activation is freed)")
                            : QString());
    const plan::OverheadParts overheadOf = plan::overheadParts(in);
    const double fixed = overheadOf.fixedBytes, frag = overheadOf.fragmentation;
    text += tr(" · overhead %1: %2 fixed per device%3 + %4 fragmentation (%5% of the rest)")
                .arg(gib(c.perDevice.overhead), gib(int64_t(fixed)),
                    gpu ? tr(" (CUDA context and allocator reserve)")
                        : tr(" (none on CPU: the engine counts its tensors)"),
                    gib(std::max<int64_t>(0, c.perDevice.overhead - int64_t(fixed))))
                .arg(frag * 100.0, 0, 'g', 3);
    return text;
}

QString PlanPage::suggestionsFor(const plan::PlanResult& c) const
{
    // What would fit, from what was planned anyway: another strategy, a smaller micro-batch,
    // more GPUs; activation checkpointing when nothing else is known to.
    QStringList fitting;
    for (const plan::PlanResult& r : m_results)
        if (r.fits)
            fitting << QString::fromStdString(plan::toString(r.input.strategy));
    QStringList tries;
    if (!fitting.isEmpty())
        tries << tr("%1 (fits with these settings)").arg(fitting.join(tr(", ")));
    if (m_largestMicroBatch > 0 && m_largestMicroBatch < c.input.microBatch)
        tries << tr("micro-batch %1 or less").arg(m_largestMicroBatch);
    if (m_fewestGpus > c.worldSize)
        tries << tr("%1 GPUs").arg(m_fewestGpus);
    if (tries.isEmpty() && c.input.checkpointing == plan::Checkpointing::None)
        tries << tr("activation checkpointing");
    return tries.isEmpty() ? QString() : tr(". Try %1.").arg(tries.join(tr("; ")));
}

void PlanPage::showModelInfo()
{
    if (!m_model)
        return;
    const bool folder = !plan::findPreset(m_modelSource.toStdString());
    m_modelInfo->setText(
        (folder ? tr("Folder %1<br>").arg(m_modelSource.toHtmlEscaped()) : QString())
        + tr("%1 layers, hidden %2, %3 heads (%4 KV), vocabulary %5, %6 positions")
              .arg(m_model->numLayers)
              .arg(m_model->hiddenSize)
              .arg(m_model->numHeads)
              .arg(m_model->numKvHeads)
              .arg(m_model->vocabSize)
              .arg(m_model->maxPositionEmbeddings));
}

void PlanPage::fillTable()
{
    const QStringList names = planCategoryNames();
    double largest = 0;
    for (const plan::PlanResult& r : m_results)
        largest = std::max({largest, double(r.perDevice.total()), double(r.hostBytesPerDevice)});
    const TableUnit unit = tableUnitFor(largest);
    m_table->clear();
    m_table->setColumnCount(int(m_results.size()));
    m_table->setRowCount(names.size() + 2);
    QStringList rows = names;
    rows << tr("total, %1").arg(unit.name) << tr("host (offload)");
    m_table->setToolTip(tr("%1 per device, by component and strategy").arg(unit.name));
    m_table->setVerticalHeaderLabels(rows);
    const QStringList tips = planCategoryTips();
    for (int row = 0; row < int(tips.size()) && row < m_table->rowCount(); ++row)
        m_table->verticalHeaderItem(row)->setToolTip(tips[row]);
    QStringList columns;
    for (int c = 0; c < int(m_results.size()); ++c) {
        const plan::PlanResult& r = m_results[size_t(c)];
        QString label = QString::fromStdString(plan::toString(r.input.strategy));
        if (r.input.strategy == m_input->strategy)
            label = "▶ " + label;
        columns << label;
        const std::vector<double> bytes = planCategoryBytes(r.perDevice);
        for (int row = 0; row < int(bytes.size()); ++row)
            m_table->setItem(row, c, new QTableWidgetItem(unitNumber(bytes[size_t(row)], unit)));
        auto* total = new QTableWidgetItem(unitNumber(double(r.perDevice.total()), unit));
        QFont bold = total->font();
        bold.setBold(true);
        total->setFont(bold);
        m_table->setItem(names.size(), c, total);
        m_table->setItem(names.size() + 1, c,
            new QTableWidgetItem(unitNumber(double(r.hostBytesPerDevice), unit)));
        for (int row = 0; row < m_table->rowCount(); ++row)
            m_table->item(row, c)->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    m_table->setHorizontalHeaderLabels(columns);
    // Categories no strategy uses (the LoRA ones under full fine-tuning, the full-model
    // gradients and optimizer under LoRA) take no row.
    for (int row = 0; row < names.size(); ++row) {
        bool used = false;
        for (const plan::PlanResult& r : m_results)
            used = used || planCategoryBytes(r.perDevice)[size_t(row)] > 0;
        m_table->setRowHidden(row, !used);
    }
}

void PlanPage::saveSettings() const
{
    QSettings s;
    s.beginGroup("plan");
    s.setValue("model", m_modelSource);
    s.setValue("gpus", m_gpus->value());
    s.setValue("nodes", m_nodes->value());
    s.setValue("device", m_device->currentData());
    s.setValue("customGiB", m_gpuCustomGiB);
    s.setValue("cpuRamGiB", m_cpuRamGiB); // 0: this machine's, whichever machine it is then
    s.setValue("hostGiB", m_hostGiB->value());
    s.setValue("mode", m_mode->currentData());
    s.setValue("strategy", m_strategy->currentData());
    s.setValue("shardGroup", m_shardGroup->value());
    m_parallel->save(s);
    s.setValue("precision", m_precision->currentData());
    s.setValue("checkpointing", m_checkpointing->currentData());
    s.setValue("offload", m_offload->currentData());
    s.setValue("reduceDtype", m_reduceDtype->currentData());
    s.setValue("microBatch", m_microBatch->value());
    s.setValue("seqLen", m_seqLen->value());
    s.setValue("gradAccum", m_gradAccum->value());
    m_lora->save(s);
    s.endGroup();
}

void PlanPage::loadSettings()
{
    QSettings s;
    s.beginGroup("plan");
    auto setCombo = [&](QComboBox* box, const char* key) {
        const int i = box->findData(s.value(key));
        if (i >= 0)
            box->setCurrentIndex(i);
    };
    m_gpus->setValue(s.value("gpus", m_gpus->value()).toInt());
    m_nodes->setValue(s.value("nodes", m_nodes->value()).toInt());
    // "customGiB" is a custom GPU's size only (it once held whatever the field showed, a card's
    // 80 GiB included, which a CPU plan then used as its RAM).
    m_gpuCustomGiB = s.value("customGiB", m_gpuCustomGiB).toDouble();
    m_cpuRamGiB = s.value("cpuRamGiB", 0.0).toDouble();
    setCombo(m_device, "device");
    showDeviceMemory();
    m_hostGiB->setValue(s.value("hostGiB", m_hostGiB->value()).toDouble());
    setCombo(m_mode, "mode");
    setCombo(m_strategy, "strategy");
    m_shardGroup->setValue(s.value("shardGroup", m_shardGroup->value()).toInt());
    m_parallel->restore(s);
    setCombo(m_precision, "precision");
    setCombo(m_checkpointing, "checkpointing");
    setCombo(m_offload, "offload");
    setCombo(m_reduceDtype, "reduceDtype");
    m_microBatch->setValue(s.value("microBatch", m_microBatch->value()).toInt());
    m_seqLen->setValue(s.value("seqLen", m_seqLen->value()).toInt());
    m_gradAccum->setValue(s.value("gradAccum", m_gradAccum->value()).toInt());
    m_lora->restore(s);
    const QString model = s.value("model").toString();
    s.endGroup();
    if (!model.isEmpty())
        setModel(model);
}

void PlanPage::restyle()
{
    m_chart->restyle();
}

} // namespace shard::widgets
