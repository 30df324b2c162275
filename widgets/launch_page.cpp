// LaunchPage: form <-> RunSpec, a preview of exactly what runs (the launchers' own command line
// and scripts, from the target's Launcher::describe), start through the run service.
#include "widgets/launch_page.h"

#include <functional>

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontMetrics>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "data/sample_builder.h"
#include "jobs/launcher.h"
#include "jobs/local_launcher.h"
#include "jobs/run_service.h"
#include "plan/run_spec_bridge.h"
#include "tokenizer/tokenizer.h"

#include "widgets/lora_fields.h"
#include "widgets/message_bar.h"
#include "widgets/parallel_fields.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace shard::widgets {

QString defaultRunName()
{
    return QStringLiteral("run-") + QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
}

namespace {

QComboBox* combo(QWidget* parent, const QStringList& items, const char* name)
{
    auto* c = new QComboBox(parent);
    c->setObjectName(name);
    for (const QString& i : items)
        c->addItem(i, i);
    return c;
}

QStringList qStrings(const std::vector<std::string>& v)
{
    QStringList out;
    for (const auto& s : v)
        out << QString::fromStdString(s);
    return out;
}

QSpinBox* spin(QWidget* parent, int lo, int hi, int value, const char* name)
{
    auto* s = new QSpinBox(parent);
    s->setObjectName(name);
    s->setRange(lo, hi);
    s->setValue(value);
    return s;
}

void setCombo(QComboBox* box, const std::string& value)
{
    const int i = box->findData(QString::fromStdString(value));
    if (i >= 0)
        box->setCurrentIndex(i);
}

} // namespace

LaunchPage::LaunchPage(QWidget* parent)
    : QWidget(parent)
{
    m_name = new QLineEdit(defaultRunName(), this);
    m_name->setObjectName("name");
    m_model = new QLineEdit(this);
    m_model->setObjectName("modelFolder");
    m_model->setPlaceholderText(tr("Hugging Face model folder (config.json + safetensors)"));
    auto* browseModel = new QPushButton(tr("Browse…"), this);
    m_data = new QLineEdit(this);
    m_data->setObjectName("data");
    m_data->setPlaceholderText(tr("train.jsonl; more.jsonl"));
    auto* browseData = new QPushButton(tr("Browse…"), this);
    m_format = combo(this, {"auto", "text", "alpaca", "chat", "tokenized", "preference"}, "format");
    m_out = new QLineEdit(this);
    m_out->setObjectName("runsRoot");
    m_out->setPlaceholderText(jobs::LocalLauncher::defaultRunsRoot());
    m_lr = new QLineEdit("3e-4", this);
    m_lr->setObjectName("lr");
    m_schedule = combo(this, {"cosine", "linear", "constant"}, "schedule");
    m_warmup = spin(this, 0, 1000000, 0, "warmup");
    m_steps = spin(this, 0, 100000000, 100, "steps");
    m_epochs = spin(this, 0, 10000, 0, "epochs");
    m_ckptEvery = spin(this, 0, 100000000, 0, "checkpointEvery");
    m_ckptEvery->setSpecialValueText(tr("at the end only"));
    m_seed = spin(this, 0, 2147483647, 0, "seed");
    m_microBatch = spin(this, 1, 65536, 1, "microBatch");
    m_seqLen = spin(this, 1, 1 << 20, 128, "seqLen");
    m_gradAccum = spin(this, 1, 65536, 1, "gradAccum");
    m_strategy = combo(this, qStrings(protocol::strategyNames()), "strategy");
    m_strategy->setCurrentIndex(m_strategy->findData("zero3"));
    m_shardGroup = spin(this, 1, 1 << 20, 1, "shardGroup");
    m_shardGroup->setEnabled(false);
    m_parallel = new ParallelFields(this);
    m_ranks = spin(this, 1, 1024, 1, "ranks");
    m_nodes = spin(this, 1, 4096, 1, "nodes");
    m_device = new QComboBox(this);
    m_device->setObjectName("device");
    // protocol::trainableDevices: auto (a GPU where the node has one), the CPU, a CUDA GPU.
    m_device->addItem(tr("Auto (GPU if the node has one)"), "auto");
    m_device->addItem(tr("CPU"), "cpu");
    m_device->addItem(tr("CUDA GPU"), "cuda");
    // The page checks a CPU run's fit against this machine's RAM, so a new form starts on the
    // CPU; a spec or plan that says auto or cuda selects that.
    m_device->setCurrentIndex(m_device->findData("cpu"));
    m_offload = combo(this, {"none", "optimizer", "params+optimizer"}, "offload");
    m_reduceDtype = combo(this, qStrings(protocol::reduceDtypes()), "reduceDtype");
    m_reduceDtype->setToolTip(tr("The gradients' reduce-scatter / all-reduce dtype under "
                                 "bf16-mixed: bf16 sends half the bytes and sums in bf16"));
    // Only what the engine trains (protocol::trainablePrecisions).
    m_precision = combo(this, qStrings(protocol::trainablePrecisions()), "precision");
    m_evalData = new QLineEdit(this);
    m_evalData->setObjectName("evalData");
    m_evalData->setPlaceholderText(tr("eval.jsonl (optional)"));
    m_evalEvery = spin(this, 0, 100000000, 0, "evalEvery");
    m_evalEvery->setSpecialValueText(tr("at the end only"));
    m_samplePrompts = new QLineEdit(this);
    m_samplePrompts->setObjectName("samplePrompts");
    m_samplePrompts->setPlaceholderText(tr("prompts.txt (optional): one prompt per line"));
    m_samplePrompts->setToolTip(
        tr("A text file of prompts, one per line (or JSON lines with a \"prompt\"): the run "
           "writes their greedy completions as it trains (Monitor ▸ Samples, Compare ▸ Samples). "
           "On a host: its path there, or copied with the inputs."));
    m_sampleEvery = spin(this, 0, 100000000, 0, "sampleEvery");
    m_sampleEvery->setSpecialValueText(tr("never"));
    m_sampleEvery->setSuffix(tr(" steps"));
    m_sampleEvery->setToolTip(tr("Complete the sample prompts every N steps and at the end"));
    m_packing = new QCheckBox(tr("Pack short samples into full sequences"), this);
    m_packing->setObjectName("packing");
    m_skipBadLines = new QCheckBox(tr("Skip malformed lines (counted)"), this);
    m_skipBadLines->setObjectName("skipBadLines");
    m_weightDecay = new QLineEdit("0", this);
    m_weightDecay->setObjectName("weightDecay");
    m_keepCheckpoints = spin(this, 0, 1000000, 2, "keepCheckpoints");
    m_keepCheckpoints->setSpecialValueText(tr("all"));
    m_maxRestarts = spin(this, 0, 1000, 0, "maxRestarts");
    m_maxRestarts->setSpecialValueText(tr("none"));
    m_maxRestarts->setToolTip(tr("When a rank dies or hangs, stop every rank and start them again "
                                 "from the latest complete checkpoint, up to this many times (one "
                                 "node; a failure that repeats at the same step is not restarted "
                                 "again)"));
    m_checkpointing = combo(this, {"none", "full"}, "checkpointing");
    m_lora = new LoraFields(this);
    m_inputs = new QComboBox(this);
    m_inputs->setObjectName("inputs");
    m_inputs->addItem(tr("are on the host already"), "host");
    m_inputs->addItem(tr("are copied there from this machine"), "copy");
    m_inputs->setToolTip(tr("SSH: where the model folder and the data files come from"));
    m_target = new QComboBox(this);
    m_target->setObjectName("target");
    // Their longest entries (a sentence, a host list) would widen the form past a 1024 px window.
    for (QComboBox* box : {m_inputs, m_target}) {
        box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
        box->setMinimumContentsLength(14);
    }
    m_target->addItem(tr("This machine"), -1);
    m_presets = new QComboBox(this);
    m_presets->setEditable(true);
    m_presets->setObjectName("presets");
    m_presets->lineEdit()->setPlaceholderText(tr("preset name"));
    m_savePreset = new QPushButton(tr("Sa&ve preset"), this);
    m_loadPreset = new QPushButton(tr("&Load preset"), this);
    m_start = new QPushButton(tr("&Start run"), this);
    m_start->setObjectName("start");
    m_start->setDefault(true);
    m_preview = new QPlainTextEdit(this);
    m_preview->setObjectName("preview");
    m_preview->setReadOnly(true);
    m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_pairs = new QPlainTextEdit(this);
    m_pairs->setObjectName("pairPreview");
    m_pairs->setReadOnly(true);
    m_pairs->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_pairs->setFixedHeight(QFontMetrics(m_pairs->font()).lineSpacing() * 9);
    m_pairs->setToolTip(tr("The first pairs of the data as the model sees them: the chat "
                           "template applied, the prompt and each answer as tokens decoded"));
    m_pairs->setVisible(false);
    m_message = new MessageBar(this);
    auto problemLabel = [this](const char* name) {
        auto* l = new QLabel(this);
        l->setObjectName(name);
        l->setWordWrap(true);
        l->setStyleSheet("color: #b3261e;");
        l->setVisible(false);
        return l;
    };
    m_nameProblem = problemLabel("nameProblem");
    m_modelProblem = problemLabel("modelProblem");
    m_dataProblem = problemLabel("dataProblem");
    m_fitProblem = problemLabel("fitProblem");
    m_scheduleNote = problemLabel("scheduleNote");
    m_scheduleNote->setStyleSheet("color: #9a6700;");
    m_dataNote = problemLabel("dataNote");
    m_dataNote->setStyleSheet("color: #9a6700;");
    m_checkingLabel = new QLabel(tr("Checking the model and data…"), this);
    m_checkingLabel->setObjectName("checking");
    m_checkingLabel->setVisible(false);

    auto* dataBox = new QGroupBox(tr("Data and output"), this);
    auto* dataForm = new QFormLayout(dataBox);
    dataForm->addRow(tr("Run &name"), m_name);
    auto* modelRow = new QHBoxLayout;
    modelRow->addWidget(m_model, 1);
    modelRow->addWidget(browseModel);
    auto* modelLabel = new QLabel(tr("&Model"), this);
    modelLabel->setBuddy(m_model);
    dataForm->addRow(modelLabel, modelRow);
    auto* dataRow = new QHBoxLayout;
    dataRow->addWidget(m_data, 1);
    dataRow->addWidget(browseData);
    auto* dataLabel = new QLabel(tr("&Data files"), this);
    dataLabel->setBuddy(m_data);
    dataForm->addRow(dataLabel, dataRow);
    dataForm->addRow(tr("F&ormat"), m_format);
    dataForm->addRow(QString(), m_packing);
    dataForm->addRow(QString(), m_skipBadLines);
    m_pairsLabel = new QLabel(tr("Pairs"), this);
    m_pairsLabel->setVisible(false);
    dataForm->addRow(m_pairsLabel, m_pairs);
    dataForm->addRow(tr("E&val data"), m_evalData);
    dataForm->addRow(tr("Eval e&very (steps)"), m_evalEvery);
    auto* browsePrompts = new QPushButton(tr("Browse…"), this);
    auto* promptsRow = new QHBoxLayout;
    promptsRow->addWidget(m_samplePrompts, 1);
    promptsRow->addWidget(browsePrompts);
    auto* promptsLabel = new QLabel(tr("Sample &prompts"), this);
    promptsLabel->setBuddy(m_samplePrompts);
    dataForm->addRow(promptsLabel, promptsRow);
    connect(browsePrompts, &QPushButton::clicked, this, [this] {
        const QString f = QFileDialog::getOpenFileName(
            this, tr("Sample prompts"), {}, tr("Prompts (*.txt *.jsonl);;All files (*)"));
        if (!f.isEmpty())
            m_samplePrompts->setText(f);
    });
    dataForm->addRow(tr("Samples every"), m_sampleEvery);
    dataForm->addRow(tr("&Output folder"), m_out);
    auto* trainBox = new QGroupBox(tr("Optimisation"), this);
    auto* trainForm = new QFormLayout(trainBox);
    trainForm->addRow(tr("&Learning rate"), m_lr);
    trainForm->addRow(tr("Wei&ght decay"), m_weightDecay);
    trainForm->addRow(tr("Sc&hedule"), m_schedule);
    trainForm->addRow(tr("&Warm-up steps"), m_warmup);
    trainForm->addRow(tr("S&teps"), m_steps);
    trainForm->addRow(tr("&Epochs (if no steps)"), m_epochs);
    trainForm->addRow(tr("Check&point every"), m_ckptEvery);
    trainForm->addRow(tr("Checkpoints &kept"), m_keepCheckpoints);
    trainForm->addRow(tr("Restarts on failure"), m_maxRestarts);
    trainForm->addRow(tr("S&eed"), m_seed);
    auto* shardBox = new QGroupBox(tr("Batch and sharding"), this);
    auto* shardForm = new QFormLayout(shardBox);
    shardForm->addRow(tr("M&icro-batch"), m_microBatch);
    shardForm->addRow(tr("Se&quence length"), m_seqLen);
    shardForm->addRow(tr("Gradient acc&umulation"), m_gradAccum);
    shardForm->addRow(tr("De&vice"), m_device);
    shardForm->addRow(tr("St&rategy"), m_strategy);
    shardForm->addRow(tr("S&hard group (hybrid)"), m_shardGroup);
    m_parallel->addRows(shardForm);
    shardForm->addRow(tr("R&anks per node"), m_ranks);
    shardForm->addRow(tr("&Nodes"), m_nodes);
    shardForm->addRow(tr("O&ffload"), m_offload);
    shardForm->addRow(tr("Pre&cision"), m_precision);
    shardForm->addRow(tr("Reduce dt&ype"), m_reduceDtype);
    shardForm->addRow(tr("Activation chec&kpointing"), m_checkpointing);
    m_lora->addRows(shardForm);
    shardForm->addRow(tr("Tar&get"), m_target);
    m_inputsLabel = new QLabel(tr("Model and data"), this);
    m_inputsLabel->setBuddy(m_inputs);
    shardForm->addRow(m_inputsLabel, m_inputs);

    m_commandBox = new QGroupBox(tr("Run a command instead of the engine"), this);
    m_commandBox->setObjectName("commandMode");
    m_commandBox->setCheckable(true);
    m_commandBox->setChecked(false);
    m_commandBox->setToolTip(tr("torchrun, deepspeed, accelerate launch or any script, on this "
                                "machine, an SSH host or through Slurm (Target, Nodes): recorded "
                                "in the store, its metric lines (Hugging Face "
                                "Trainer, torchtitan) or TensorBoard files followed, stoppable"));
    m_command = new QLineEdit(this);
    m_command->setObjectName("command");
    m_command->setPlaceholderText(tr("torchrun --nproc_per_node 2 train.py --deepspeed ds.json"));
    m_workdir = new QLineEdit(this);
    m_workdir->setObjectName("workdir");
    m_workdir->setPlaceholderText(tr("the run folder"));
    m_logdir = new QLineEdit(this);
    m_logdir->setObjectName("logdir");
    m_logdir->setPlaceholderText(tr("none: its output's metric lines"));
    m_commandEnv = new QLineEdit(this);
    m_commandEnv->setObjectName("commandEnv");
    m_commandEnv->setPlaceholderText(tr("KEY=VALUE KEY=VALUE"));
    auto* commandFields = new QWidget(m_commandBox);
    {
        // Folded away until the box is checked: the engine's fields stay at the top.
        (new QVBoxLayout(m_commandBox))->addWidget(commandFields);
        commandFields->setVisible(false);
        auto* form = new QFormLayout(commandFields);
        form->setContentsMargins(0, 0, 0, 0);
        form->addRow(tr("Co&mmand"), m_command);
        form->addRow(tr("Wor&king folder"), m_workdir);
        form->addRow(tr("TensorBoard &log folder"), m_logdir);
        form->addRow(tr("En&vironment"), m_commandEnv);
        m_editSbatchButton = new QPushButton(tr("Edit the &batch script…"), commandFields);
        m_editSbatchButton->setObjectName("editSbatch");
        m_editSbatchButton->setToolTip(
            tr("Slurm: add module loads, #SBATCH lines or environment to the job's script; it "
               "must keep the line that runs `shard supervise-command` on the run folder"));
        m_editSbatchButton->setVisible(false);
        form->addRow(QString(), m_editSbatchButton);
        connect(m_editSbatchButton, &QPushButton::clicked, this, &LaunchPage::editSbatch);
    }
    m_engineBoxes << trainBox;
    // A command runs on a target too (and on Slurm over nodes): of the sharding box, those two
    // fields stay.
    for (QWidget* w : shardBox->findChildren<QWidget*>(QString(), Qt::FindDirectChildrenOnly)) {
        const auto* label = qobject_cast<QLabel*>(w);
        const QWidget* buddy = label ? label->buddy() : nullptr;
        if (w != m_target && w != m_nodes && buddy != m_target && buddy != m_nodes)
            m_engineBoxes << w;
    }
    // Data and output keep the run name and folder, which a command run uses too.
    for (QWidget* w : {static_cast<QWidget*>(m_model), static_cast<QWidget*>(browseModel),
             static_cast<QWidget*>(m_data), static_cast<QWidget*>(browseData),
             static_cast<QWidget*>(m_format), static_cast<QWidget*>(m_packing),
             static_cast<QWidget*>(m_skipBadLines), static_cast<QWidget*>(m_evalData),
             static_cast<QWidget*>(m_evalEvery), static_cast<QWidget*>(m_samplePrompts),
             static_cast<QWidget*>(browsePrompts), static_cast<QWidget*>(m_sampleEvery)})
        m_engineBoxes << w;
    connect(m_commandBox, &QGroupBox::toggled, this, [this, commandFields](bool on) {
        commandFields->setVisible(on);
        for (QWidget* w : m_engineBoxes)
            w->setEnabled(!on);
        updatePreview();
    });
    for (QLineEdit* e : {m_command, m_workdir, m_logdir, m_commandEnv})
        connect(e, &QLineEdit::textChanged, this, [this] { m_debounce->start(); });

    auto* forms = new QHBoxLayout;
    auto* col1 = new QVBoxLayout;
    col1->addWidget(m_commandBox); // first: a user with a script of their own sees it at once
    col1->addWidget(dataBox);
    col1->addWidget(trainBox);
    col1->addStretch(1);
    auto* col2 = new QVBoxLayout;
    col2->addWidget(shardBox);
    col2->addStretch(1);
    forms->addLayout(col1, 3);
    forms->addLayout(col2, 2);

    auto* presetRow = new QHBoxLayout;
    presetRow->addWidget(m_presets, 1);
    presetRow->addWidget(m_loadPreset);
    presetRow->addWidget(m_savePreset);
    presetRow->addStretch(1);
    presetRow->addWidget(m_start);

    // The fields scroll when the window is short; the preview and Start stay in view.
    auto* formsWidget = new QWidget(this);
    formsWidget->setLayout(forms);
    auto* scroll = new QScrollArea(this);
    scroll->setObjectName("fieldsScroll");
    scroll->setWidget(formsWidget);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    // What stops a start, and what only warns, sits above Start: always in view, and the fields
    // above never move when a problem comes or goes.
    auto* problems = new QVBoxLayout;
    problems->setSpacing(2);
    for (QLabel* l : {m_nameProblem, m_modelProblem, m_dataProblem, m_fitProblem, m_dataNote,
             m_scheduleNote, m_checkingLabel})
        problems->addWidget(l);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(scroll, 3);
    layout->addLayout(problems);
    layout->addLayout(presetRow);
    layout->addWidget(m_message);
    layout->addWidget(m_preview, 1);

    QList<QWidget*> order
        = {m_name, m_model, browseModel, m_data, browseData, m_format, m_packing, m_skipBadLines,
            m_evalData, m_evalEvery, m_samplePrompts, m_sampleEvery, m_out, m_lr, m_weightDecay,
            m_schedule, m_warmup, m_steps, m_epochs, m_ckptEvery, m_keepCheckpoints, m_maxRestarts,
            m_seed, m_microBatch, m_seqLen, m_gradAccum, m_device, m_strategy, m_shardGroup};
    order << m_parallel->widgets()
          << QList<QWidget*> {m_ranks, m_nodes, m_offload, m_precision, m_reduceDtype,
                 m_checkpointing}
          << m_lora->widgets()
          << QList<QWidget*> {m_target, m_presets, m_loadPreset, m_savePreset, m_start, m_preview};
    for (qsizetype i = 1; i < order.size(); ++i)
        setTabOrder(order[i - 1], order[i]);

    m_checks = new QFutureWatcher<InputProblems>(this);
    connect(m_checks, &QFutureWatcher<InputProblems>::finished, this, [this] {
        if (m_nextCheck) { // the fields changed meanwhile: their check, not this one, counts
            const jobs::PreflightInput next = *std::exchange(m_nextCheck, std::nullopt);
            m_checks->setFuture(QtConcurrent::run([next] { return jobs::preflight(next); }));
            return;
        }
        const InputProblems result = m_checks->result();
        if (!result.pairPreview.isEmpty() && !m_pairs->isHidden() && !m_pairsKey.isEmpty())
            m_pairs->setPlainText(result.pairPreview);
        showChecks(commandMode() ? InputProblems() : result);
    });

    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(30);
    connect(m_debounce, &QTimer::timeout, this, &LaunchPage::updatePreview);
    auto changed = [this] { m_debounce->start(); };
    for (QLineEdit* e : {m_name, m_model, m_data, m_out, m_lr, m_evalData, m_weightDecay})
        connect(e, &QLineEdit::textChanged, this, changed);
    for (QComboBox* c : {m_format, m_schedule, m_strategy, m_precision, m_checkpointing, m_target,
             m_device, m_offload, m_reduceDtype, m_inputs})
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this, changed);
    // The engine refuses a bf16 reduce where the precision has no choice.
    auto reduceChoice = [this] {
        m_reduceDtype->setEnabled(
            protocol::hasReduceDtypeChoice(m_precision->currentData().toString().toStdString()));
    };
    connect(m_precision, qOverload<int>(&QComboBox::currentIndexChanged), this, reduceChoice);
    reduceChoice();
    for (QSpinBox* s : {m_warmup, m_steps, m_epochs, m_ckptEvery, m_seed, m_microBatch, m_seqLen,
             m_gradAccum, m_ranks, m_nodes, m_shardGroup, m_evalEvery, m_keepCheckpoints,
             m_maxRestarts, m_sampleEvery})
        connect(s, qOverload<int>(&QSpinBox::valueChanged), this, changed);
    // A prompts file chosen while "every" is never also sets it, to a tenth of the run.
    connect(m_samplePrompts, &QLineEdit::textChanged, this, [this, changed](const QString& text) {
        if (!text.trimmed().isEmpty() && m_sampleEvery->value() == 0)
            m_sampleEvery->setValue(std::max(1, m_steps->value() / 10));
        changed();
    });
    connect(m_lora, &LoraFields::changed, this, changed);
    connect(m_parallel, &ParallelFields::changed, this, changed);
    // Full fine-tuning's live DPO reference is not offered under tensor or pipeline parallel.
    connect(m_parallel, &ParallelFields::changed, m_lora, [this] {
        m_lora->setModelParallel(
            m_parallel->tensorParallel() > 1 || m_parallel->pipelineStages() > 1);
    });
    // Preference pairs are not packed (the engine refuses it).
    auto packingChoice
        = [this] { m_packing->setEnabled(m_lora->objective() == QLatin1String("sft")); };
    connect(m_lora, &LoraFields::changed, this, packingChoice);
    packingChoice();
    for (QCheckBox* b : {m_packing, m_skipBadLines})
        connect(b, &QCheckBox::toggled, this, changed);
    connect(m_strategy, qOverload<int>(&QComboBox::currentIndexChanged), this,
        [this] { m_shardGroup->setEnabled(m_strategy->currentData().toString() == "hybrid"); });
    connect(browseModel, &QPushButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, tr("Model folder"));
        if (!d.isEmpty())
            m_model->setText(d);
    });
    connect(browseData, &QPushButton::clicked, this, [this] {
        const QStringList f = QFileDialog::getOpenFileNames(
            this, tr("Data files"), {}, tr("JSON lines (*.jsonl *.json);;All files (*)"));
        if (!f.isEmpty())
            setDataFiles(f);
    });
    connect(m_savePreset, &QPushButton::clicked, this, [this] {
        const QString name = m_presets->currentText().trimmed();
        if (name.isEmpty()) {
            m_message->showMessage(tr("Type a name for the preset first."));
            return;
        }
        savePreset(name);
    });
    connect(m_loadPreset, &QPushButton::clicked, this,
        [this] { loadPreset(m_presets->currentText().trimmed()); });
    connect(m_start, &QPushButton::clicked, this, &LaunchPage::start);

    m_masterPort = jobs::pickMasterPort();
    const QStringList presets = presetNames();
    m_presets->addItems(presets);
    m_presets->setCurrentText({});
    updatePreview();
}

void LaunchPage::setStore(jobs::RunService* store)
{
    m_store = store;
    connect(store, &jobs::RunService::launched, this, [this](qint64 id, const QString& dir) {
        m_starting = false;
        m_message->showMessage(tr("Run %1 started in %2").arg(id).arg(dir), MessageBar::Kind::Info);
        m_name->setText(defaultRunName());     // the next run gets a name of its own
        m_masterPort = jobs::pickMasterPort(); // the next run gets its own port
        updatePreview();
        Q_EMIT launched(id, dir);
    });
    connect(store, &jobs::RunService::errorOccurred, this, [this](const QString& message) {
        if (m_starting) {
            m_starting = false;
            updateStartEnabled();
            m_message->showMessage(message);
        }
    });
}

void LaunchPage::setHosts(const QList<HostEntry>& hosts)
{
    const QString current = m_target->currentText();
    m_hosts = hosts;
    QSignalBlocker block(m_target);
    m_target->clear();
    m_target->addItem(tr("This machine"), -1);
    for (int i = 0; i < hosts.size(); ++i)
        m_target->addItem(hosts[i].kind == "slurm" ? tr("Slurm: %1").arg(hosts[i].name)
                                                   : tr("SSH: %1").arg(hosts[i].name),
            i);
    const int again = m_target->findText(current);
    m_target->setCurrentIndex(again >= 0 ? again : 0);
    updatePreview();
}

void LaunchPage::setTarget(int index)
{
    m_target->setCurrentIndex(index);
}

bool LaunchPage::copiesInputs() const
{
    return target().kind == jobs::TargetKind::Ssh && m_inputs->currentData().toString() == "copy";
}

jobs::LaunchTarget LaunchPage::target() const
{
    const int host = m_target->currentData().toInt();
    if (host < 0 || host >= m_hosts.size())
        return {};
    const HostEntry& h = m_hosts[host];
    const QString address = h.sshAddress();
    if (h.kind == "slurm") {
        jobs::SlurmOptions options;
        options.via = address;
        options.partition = h.partition;
        options.time = h.timeLimit;
        options.preemptSignalSec = h.preemptSignalSec;
        return jobs::LaunchTarget::onSlurm(options);
    }
    return jobs::LaunchTarget::ssh({address});
}

void LaunchPage::applyPlan(const plan::PlanInput& in, const QString& modelSource)
{
    protocol::RunSpec s = fieldsSpec();
    plan::applyPlanToSpec(in, modelSource.toStdString(), s);
    const bool preset = plan::findPreset(s.model).has_value() && !QDir(modelSource).exists();
    if (preset)
        s.model.clear(); // a preset is an architecture without weights: nothing to train
    toFields(s, /*keepBase=*/true);
    updatePreview();
    QStringList notes;
    if (preset)
        notes << tr("The plan is for the preset '%1', which has no weights on this machine: choose "
                    "a model folder of that architecture.")
                     .arg(modelSource);
    if (m_precision->currentData().toString().toStdString() != s.precision)
        notes << tr("Precision %1 is not trained by the engine; choose one of %2.")
                     .arg(QString::fromStdString(s.precision),
                         qStrings(protocol::trainablePrecisions()).join(", "));
    if (notes.isEmpty())
        m_message->showMessage(tr("Settings taken from the plan."), MessageBar::Kind::Info);
    else
        m_message->showMessage(notes.join(' '));
}

QString LaunchPage::runDirectory() const
{
    const QString root = m_out->text().trimmed().isEmpty() ? jobs::LocalLauncher::defaultRunsRoot()
                                                           : m_out->text().trimmed();
    return QDir(root).absoluteFilePath(jobs::safeDirName(m_name->text().trimmed()));
}

protocol::RunSpec LaunchPage::fieldsSpec() const
{
    // Settings the form does not show (eval split, clipping, betas...) come from the preset or
    // run it was filled from.
    protocol::RunSpec s = m_base;
    s.data.clear();
    s.name = m_name->text().trimmed().toStdString();
    s.model = m_model->text().trimmed().toStdString();
    for (const QString& f : m_data->text().split(';', Qt::SkipEmptyParts))
        if (!f.trimmed().isEmpty())
            s.data.push_back(f.trimmed().toStdString());
    s.dataFormat = m_format->currentData().toString().toStdString();
    s.packing = m_packing->isChecked() && m_packing->isEnabled();
    s.skipBadLines = m_skipBadLines->isChecked();
    s.evalData = m_evalData->text().trimmed().toStdString();
    s.evalEvery = m_evalEvery->value();
    s.samplePrompts = m_samplePrompts->text().trimmed().toStdString();
    s.sampleEvery = m_sampleEvery->value();
    s.outDir = runDirectory().toStdString();
    bool ok = false;
    if (const double lr = m_lr->text().trimmed().toDouble(&ok); ok)
        s.lr = lr;
    if (const double wd = m_weightDecay->text().trimmed().toDouble(&ok); ok)
        s.weightDecay = wd;
    s.schedule = m_schedule->currentData().toString().toStdString();
    s.warmup = m_warmup->value();
    s.steps = m_steps->value();
    s.epochs = m_steps->value() > 0 ? 0 : m_epochs->value();
    s.checkpointEvery = m_ckptEvery->value();
    s.keepCheckpoints = m_keepCheckpoints->value();
    s.maxRestarts = m_maxRestarts->value();
    s.seed = uint64_t(m_seed->value());
    s.microBatch = m_microBatch->value();
    s.seqLen = m_seqLen->value();
    s.gradAccum = m_gradAccum->value();
    s.device = m_device->currentData().toString().toStdString();
    s.strategy = m_strategy->currentData().toString().toStdString();
    s.procsPerNode = m_ranks->value();
    s.nodes = m_nodes->value();
    s.shardGroup = s.strategy == "hybrid" ? m_shardGroup->value() : 0;
    m_parallel->writeTo(s);
    s.offload = m_offload->currentData().toString().toStdString();
    s.precision = m_precision->currentData().toString().toStdString();
    s.reduceDtype = m_reduceDtype->isEnabled()
        ? m_reduceDtype->currentData().toString().toStdString()
        : "fp32";
    s.checkpointing = m_checkpointing->currentData().toString().toStdString();
    m_lora->writeTo(s);
    return s;
}

jobs::Result<protocol::RunSpec> LaunchPage::spec() const
{
    protocol::RunSpec s = fieldsSpec();
    if (s.name.empty())
        return jobs::fail(tr("Give the run a name."));
    if (s.model.empty())
        return jobs::fail(tr("Choose a model folder (a Hugging Face folder with config.json)."));
    if (s.data.empty())
        return jobs::fail(tr("Choose at least one data file."));
    bool ok = false;
    s.lr = m_lr->text().trimmed().toDouble(&ok);
    if (!ok)
        return jobs::fail(tr("Learning rate '%1' is not a number (e.g. 3e-4).").arg(m_lr->text()));
    s.weightDecay = m_weightDecay->text().trimmed().toDouble(&ok);
    if (!ok || s.weightDecay < 0)
        return jobs::fail(
            tr("Weight decay '%1' is not a number >= 0 (e.g. 0.1).").arg(m_weightDecay->text()));
    try {
        protocol::validate(s);
    } catch (const std::exception& e) {
        return jobs::fail(QString::fromUtf8(e.what()));
    }
    return s;
}

QString LaunchPage::cannotRunHere() const
{
    const std::string device = m_device->currentData().toString().toStdString();
    const auto& devices = protocol::trainableDevices();
    if (std::find(devices.begin(), devices.end(), device) == devices.end())
        return tr("This version of the engine trains on %1 only. Choose one of them as Device.")
            .arg(qStrings(devices).join(", ").toUpper());
    const std::string offload = m_offload->currentData().toString().toStdString();
    const auto& offloads = protocol::trainableOffloads();
    if (std::find(offloads.begin(), offloads.end(), offload) == offloads.end())
        return tr("This version of the engine cannot offload '%1'. Choose Offload: none.")
            .arg(QString::fromStdString(offload));
    // Auto may resolve to the CPU where the run starts, and the engine refuses offload there.
    if (offload != "none" && device != "cuda")
        return tr("Offload moves a GPU's masters and optimizer state to host memory: choose "
                  "Device: CUDA GPU, or Offload: none.");
    return {};
}

jobs::Result<jobs::LaunchRequest> LaunchPage::request() const
{
    auto s = spec();
    if (!s)
        return jobs::fail(s.error());
    if (const QString why = cannotRunHere(); !why.isEmpty())
        return jobs::fail(why);
    jobs::LaunchRequest r;
    r.name = QString::fromStdString(s.value().name);
    r.spec = s.value();
    r.runDir = runDirectory();
    r.masterPort = m_masterPort;
    r.workerProgram = m_workerProgram;
    r.copyInputs = copiesInputs();
    return r;
}

QString LaunchPage::commandPreview() const
{
    return m_preview->toPlainText();
}

void LaunchPage::updatePreview()
{
    m_debounce->stop();
    m_editSbatchButton->setVisible(commandMode() && target().kind == jobs::TargetKind::Slurm);
    m_editSbatchButton->setText(m_editedSbatch.isEmpty() ? tr("Edit the &batch script…")
                                                         : tr("Edit the &batch script (edited)…"));
    if (commandMode()) {
        showChecks(InputProblems()); // the engine's checks do not apply to a command
        auto c = commandRequest();
        if (!c) {
            m_preview->setPlainText(tr("# Not ready: %1").arg(c.error()));
            m_start->setEnabled(false);
        } else {
            const jobs::CommandSpec& spec = c.value().spec;
            auto described = jobs::describeCommandRun(c.value());
            QString text
                = described ? described.value() : tr("# Not ready: %1").arg(described.error());
            text += spec.logdir.isEmpty()
                ? tr("# points: the metric lines it prints (Hugging Face Trainer, torchtitan)\n")
                : tr("# points: the TensorBoard event files in %1\n").arg(spec.logdir);
            m_preview->setPlainText(text);
            m_start->setEnabled(described && m_store != nullptr && !m_starting);
        }
        Q_EMIT previewChanged();
        return;
    }
    m_ready = false;
    auto r = request();
    if (!r) {
        m_preview->setPlainText(tr("# Not ready: %1").arg(r.error()));
        showChecks(InputProblems());
        Q_EMIT previewChanged();
        return;
    }
    // Exactly what the target's launcher will run.
    auto launcher = jobs::makeLauncher(target(), nullptr);
    auto text = launcher ? launcher.value()->describe(r.value())
                         : jobs::Result<QString>(jobs::fail(launcher.error()));
    if (!text) {
        m_preview->setPlainText(tr("# Not ready: %1").arg(text.error()));
        showChecks(InputProblems());
        Q_EMIT previewChanged();
        return;
    }
    m_preview->setPlainText(text.value());
    updatePairPreview(r.value().spec);
    m_ready = true;
    if (auto fields = spec())
        runChecks(fields.value());
    const bool ssh = target().kind == jobs::TargetKind::Ssh;
    m_inputs->setVisible(ssh);
    m_inputsLabel->setVisible(ssh);
    Q_EMIT previewChanged();
}

QString LaunchPage::pairPreview() const
{
    return m_pairs->isHidden() ? QString() : m_pairs->toPlainText();
}

void LaunchPage::updatePairPreview(const protocol::RunSpec& spec)
{
    const bool pairs = spec.usesPreferencePairs();
    const bool here = target().kind == jobs::TargetKind::Local || copiesInputs();
    m_pairs->setVisible(pairs);
    m_pairsLabel->setVisible(pairs);
    if (!pairs)
        return;
    if (!here || spec.data.empty()) {
        m_pairs->setPlainText(tr("(the data is read where the run starts)"));
        m_pairsKey.clear();
        return;
    }
    const QString file = QString::fromStdString(spec.data.front());
    const QString tokDir
        = QString::fromStdString(spec.tokenizer.empty() ? spec.model : spec.tokenizer);
    const QFileInfo fi(file), ti(tokDir + "/tokenizer.json");
    // Made again only when the file, the tokenizer, the template or the length change.
    const QString key = QStringList {fi.absoluteFilePath(),
        fi.lastModified().toString(Qt::ISODateWithMs), QString::number(fi.size()),
        ti.absoluteFilePath(), ti.lastModified().toString(Qt::ISODateWithMs),
        QString::fromStdString(spec.chatTemplate), QString::number(spec.seqLen)}
                            .join('|');
    if (key == m_pairsKey)
        return;
    m_pairsKey = key;
    if (!fi.isFile() || !ti.isFile()) {
        m_pairs->setPlainText(fi.isFile() ? tr("(no tokenizer.json in %1)").arg(tokDir)
                                          : tr("(no such file: %1)").arg(file));
        return;
    }
    // The pairs are read by the preflight, with the tokenizer it loads anyway, off this thread.
    m_pairs->setPlainText(tr("(reading the first pairs…)"));
}

jobs::PreflightInput LaunchPage::preflightInput(const protocol::RunSpec& spec) const
{
    jobs::PreflightInput in;
    in.spec = spec;
    in.runName = m_name->text().trimmed();
    in.wording = jobs::Wording::Studio;
    const bool local = target().kind == jobs::TargetKind::Local;
    // Files are checked where they are read: on this machine, or copied from it.
    in.checkFiles = local || copiesInputs();
    in.checkRunFolder = local;
    in.checkFit = local; // a CPU run's ranks share this machine's memory
    return in;
}

InputProblems LaunchPage::checkInputs() const
{
    auto s = spec();
    return s ? jobs::preflight(preflightInput(s.value())) : InputProblems();
}

void LaunchPage::runChecks(const protocol::RunSpec& spec)
{
    m_checked = false;
    updateStartEnabled();
    m_checkingLabel->setVisible(true);
    const jobs::PreflightInput in = preflightInput(spec);
    if (m_checks->isRunning()) {
        m_nextCheck = in;
        return;
    }
    m_checks->setFuture(QtConcurrent::run([in] { return jobs::preflight(in); }));
}

void LaunchPage::showChecks(const InputProblems& p)
{
    m_lastCheck = p;
    m_checked = !m_checks->isRunning() && !m_nextCheck;
    m_checkingLabel->setVisible(!m_checked);
    // Each problem says which part of the form it concerns: they are shown above Start.
    const std::pair<QLabel*, QString> rows[] = {{m_nameProblem, p.name},
        {m_modelProblem, p.model.isEmpty() ? QString() : tr("Model: %1").arg(p.model)},
        {m_dataProblem, p.data.isEmpty() ? QString() : tr("Data: %1").arg(p.data)},
        {m_fitProblem, p.fit.isEmpty() ? QString() : tr("Batch and memory: %1").arg(p.fit)},
        {m_dataNote, p.dataNote}, {m_scheduleNote, p.schedule}};
    for (const auto& [label, text] : rows) {
        label->setText(text);
        label->setVisible(!text.isEmpty());
    }
    updateStartEnabled();
    if (m_checked && m_startWhenChecked) {
        m_startWhenChecked = false;
        start();
    }
}

void LaunchPage::updateStartEnabled()
{
    if (commandMode())
        return; // its own rule (updatePreview)
    const bool can
        = m_store != nullptr && !m_starting && m_ready && m_checked && !m_lastCheck.blocking();
    m_start->setEnabled(can);
    m_start->setToolTip(can                                  ? QString()
            : m_ready && !m_checked                          ? tr("Checking the model and data…")
            : m_ready && m_checked && m_lastCheck.blocking() ? m_lastCheck.first()
                                                             : QString());
}

bool LaunchPage::commandMode() const
{
    return m_commandBox->isChecked();
}

void LaunchPage::setCommandMode(bool on)
{
    m_commandBox->setChecked(on);
}

void LaunchPage::setCommand(
    const QString& command, const QString& workdir, const QString& logdir, const QString& env)
{
    m_command->setText(command);
    m_workdir->setText(workdir);
    m_logdir->setText(logdir);
    m_commandEnv->setText(env);
    updatePreview();
}

jobs::Result<jobs::CommandRunRequest> LaunchPage::commandRequest() const
{
    jobs::CommandRunRequest r;
    r.target = target();
    const bool here = r.target.kind == jobs::TargetKind::Local;
    if (r.target.kind == jobs::TargetKind::Slurm) {
        r.target.slurm.nodes = m_nodes->value();
        r.sbatchScript = m_editedSbatch;
    }
    r.name = m_name->text().trimmed();
    if (r.name.isEmpty())
        return jobs::fail(tr("give the run a name"));
    r.runDir = runDirectory();
    r.spec.command = m_command->text().trimmed();
    if (r.spec.command.isEmpty())
        return jobs::fail(tr("enter the command to run"));
    r.spec.workdir = m_workdir->text().trimmed();
    if (here && !r.spec.workdir.isEmpty() && !QFileInfo(r.spec.workdir).isDir())
        return jobs::fail(tr("working folder %1: no such folder").arg(r.spec.workdir));
    r.spec.logdir = m_logdir->text().trimmed();
    for (const QString& kv : m_commandEnv->text().split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
        if (kv.indexOf('=') <= 0)
            return jobs::fail(tr("environment: '%1' is not KEY=VALUE").arg(kv));
        r.spec.env << kv;
    }
    if (here && QFileInfo::exists(r.runDir + QStringLiteral("/events.jsonl")))
        return jobs::fail(
            tr("the run folder %1 already holds a run: choose another name").arg(r.runDir));
    return r;
}

void LaunchPage::setEditedSbatch(const QString& script)
{
    m_editedSbatch = script;
    updatePreview();
}

void LaunchPage::editSbatch()
{
    auto c = commandRequest();
    if (!c) {
        m_message->showMessage(tr("Cannot edit the batch script yet: %1").arg(c.error()));
        return;
    }
    jobs::CommandRunRequest written = c.value();
    written.sbatchScript.clear();
    auto generated = jobs::commandRunSbatch(written);
    if (!generated) {
        m_message->showMessage(generated.error());
        return;
    }
    QDialog dialog(this);
    dialog.setObjectName("sbatchDialog");
    dialog.setWindowTitle(tr("Batch script of %1").arg(c.value().name));
    auto* editor = new QPlainTextEdit(&dialog);
    editor->setObjectName("sbatchEditor");
    editor->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    editor->setPlainText(m_editedSbatch.isEmpty() ? generated.value() : m_editedSbatch);
    auto* buttons = new QDialogButtonBox(
        QDialogButtonBox::Ok | QDialogButtonBox::Cancel | QDialogButtonBox::Reset, &dialog);
    buttons->button(QDialogButtonBox::Reset)->setText(tr("Use the &written script"));
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    connect(buttons->button(QDialogButtonBox::Reset), &QPushButton::clicked, editor,
        [editor, text = generated.value()] { editor->setPlainText(text); });
    auto* layout = new QVBoxLayout(&dialog);
    layout->addWidget(new QLabel(tr("Submitted as it is. Keep the line that runs `shard "
                                    "supervise-command` on the run folder: it runs the command "
                                    "and records it."),
        &dialog));
    layout->addWidget(editor, 1);
    layout->addWidget(buttons);
    dialog.resize(720, 480);
    if (dialog.exec() != QDialog::Accepted)
        return;
    const QString text = editor->toPlainText();
    setEditedSbatch(text == generated.value() ? QString() : text);
}

void LaunchPage::start()
{
    if (m_debounce->isActive())
        updatePreview(); // fields just edited: their preview and preflight, not the last ones
    // What starts: the command, or the engine with the fields' spec on the target.
    QString name;
    std::function<void()> launch;
    if (commandMode()) {
        showChecks(InputProblems()); // the engine's checks do not apply to a command
        auto c = commandRequest();
        if (!c) {
            m_message->showMessage(c.error());
            return;
        }
        name = c.value().name;
        launch = [this, req = c.value()] { m_store->launchCommand(req); };
    } else {
        auto r = request();
        if (!r) {
            m_message->showMessage(r.error());
            return;
        }
        if (!m_checked) { // started as soon as the fields' preflight is done
            m_startWhenChecked = true;
            m_message->showMessage(
                tr("Checking the model and data before the start…"), MessageBar::Kind::Info);
            return;
        }
        if (m_lastCheck.blocking()) {
            m_message->showMessage(tr("Not started: %1").arg(m_lastCheck.first()));
            return;
        }
        name = r.value().name;
        launch = [this, req = r.value(), t = target()] { m_store->launch(req, t); };
    }
    if (!m_store) {
        m_message->showMessage(tr("The run store is not open; runs cannot be started."));
        return;
    }
    m_starting = true;
    m_start->setEnabled(false);
    m_message->showMessage(tr("Starting %1…").arg(name), MessageBar::Kind::Info);
    launch();
}

void LaunchPage::toFields(const protocol::RunSpec& s, bool keepBase)
{
    if (!keepBase)
        m_base = s;
    m_name->setText(QString::fromStdString(s.name));
    m_model->setText(QString::fromStdString(s.model));
    QStringList data;
    for (const auto& d : s.data)
        data << QString::fromStdString(d);
    m_data->setText(data.join("; "));
    setCombo(m_format, s.dataFormat);
    m_packing->setChecked(s.packing);
    m_skipBadLines->setChecked(s.skipBadLines);
    m_evalData->setText(QString::fromStdString(s.evalData));
    m_evalEvery->setValue(int(s.evalEvery));
    m_sampleEvery->setValue(int(s.sampleEvery)); // first: a loaded file keeps its every N
    m_samplePrompts->setText(QString::fromStdString(s.samplePrompts));
    m_lr->setText(QString::number(s.lr, 'g', 6));
    m_weightDecay->setText(QString::number(s.weightDecay, 'g', 6));
    setCombo(m_schedule, s.schedule);
    m_warmup->setValue(int(s.warmup));
    m_steps->setValue(int(s.steps));
    m_epochs->setValue(int(s.epochs));
    m_ckptEvery->setValue(int(s.checkpointEvery));
    m_keepCheckpoints->setValue(int(s.keepCheckpoints));
    m_maxRestarts->setValue(s.maxRestarts);
    m_seed->setValue(int(s.seed));
    m_microBatch->setValue(int(s.microBatch));
    m_seqLen->setValue(int(s.seqLen));
    m_gradAccum->setValue(int(s.gradAccum));
    setCombo(m_device, s.device);
    setCombo(m_strategy, s.strategy);
    if (s.shardGroup > 0)
        m_shardGroup->setValue(s.shardGroup);
    m_parallel->show(s);
    m_ranks->setValue(s.procsPerNode);
    m_nodes->setValue(s.nodes);
    setCombo(m_offload, s.offload);
    setCombo(m_precision, s.precision);
    setCombo(m_reduceDtype, s.reduceDtype);
    setCombo(m_checkpointing, s.checkpointing);
    m_lora->show(s);
}

bool LaunchPage::loadRunSpec(const nlohmann::json& runJson)
{
    try {
        const protocol::RunSpec s = protocol::runSpecFromJson(runJson);
        toFields(s);
        if (!s.outDir.empty())
            m_out->setText(QFileInfo(QString::fromStdString(s.outDir)).absolutePath());
    } catch (const std::exception& e) {
        m_message->showMessage(
            tr("This run's settings cannot be loaded: %1").arg(QString::fromUtf8(e.what())));
        return false;
    }
    updatePreview();
    return true;
}

void LaunchPage::savePreset(const QString& name)
{
    auto s = spec();
    if (!s) {
        m_message->showMessage(tr("Preset not saved: %1").arg(s.error()));
        return;
    }
    QSettings settings;
    settings.beginGroup("launchPresets");
    settings.setValue(name, QString::fromStdString(protocol::toJson(s.value()).dump()));
    settings.endGroup();
    if (m_presets->findText(name) < 0)
        m_presets->addItem(name);
    m_message->showMessage(tr("Saved preset '%1'.").arg(name), MessageBar::Kind::Info);
}

bool LaunchPage::loadPreset(const QString& name)
{
    QSettings settings;
    settings.beginGroup("launchPresets");
    const QString text = settings.value(name).toString();
    settings.endGroup();
    if (text.isEmpty()) {
        m_message->showMessage(tr("No preset named '%1'.").arg(name));
        return false;
    }
    try {
        toFields(protocol::runSpecFromJson(nlohmann::json::parse(text.toStdString())));
    } catch (const std::exception& e) {
        m_message->showMessage(
            tr("Preset '%1' cannot be read: %2").arg(name, QString::fromUtf8(e.what())));
        return false;
    }
    m_message->showMessage(tr("Loaded preset '%1'.").arg(name), MessageBar::Kind::Info);
    updatePreview();
    return true;
}

QStringList LaunchPage::presetNames() const
{
    QSettings settings;
    settings.beginGroup("launchPresets");
    return settings.childKeys();
}

void LaunchPage::saveSettings() const
{
    QSettings s;
    s.beginGroup("launch");
    if (auto sp = spec())
        s.setValue("last", QString::fromStdString(protocol::toJson(sp.value()).dump()));
    s.setValue("runsRoot", m_out->text());
    s.setValue("commandMode", commandMode());
    s.setValue("command", m_command->text());
    s.setValue("workdir", m_workdir->text());
    s.setValue("logdir", m_logdir->text());
    s.setValue("commandEnv", m_commandEnv->text());
    s.setValue("commandSbatch", m_editedSbatch);
    s.endGroup();
}

void LaunchPage::loadSettings()
{
    QSettings s;
    s.beginGroup("launch");
    const QString last = s.value("last").toString();
    m_out->setText(s.value("runsRoot").toString());
    m_command->setText(s.value("command").toString());
    m_workdir->setText(s.value("workdir").toString());
    m_logdir->setText(s.value("logdir").toString());
    m_commandEnv->setText(s.value("commandEnv").toString());
    m_editedSbatch = s.value("commandSbatch").toString();
    m_commandBox->setChecked(s.value("commandMode", false).toBool());
    s.endGroup();
    if (last.isEmpty())
        return;
    try {
        toFields(protocol::runSpecFromJson(nlohmann::json::parse(last.toStdString())));
    } catch (const std::exception&) {
        // An old or hand-edited setting: start from the defaults rather than fail.
    }
    m_name->setText(defaultRunName()); // the last run's settings, not its name: that one is taken
    updatePreview();
}

QString LaunchPage::messageText() const
{
    return m_message->text();
}

void LaunchPage::setModelFolder(const QString& folder)
{
    m_model->setText(folder);
}
void LaunchPage::setDataFiles(const QStringList& files)
{
    m_data->setText(files.join("; "));
}
void LaunchPage::setRunsRoot(const QString& folder)
{
    m_out->setText(folder);
}
void LaunchPage::setRunName(const QString& name)
{
    m_name->setText(name);
}
void LaunchPage::setSteps(int steps)
{
    m_steps->setValue(steps);
}

} // namespace shard::widgets
