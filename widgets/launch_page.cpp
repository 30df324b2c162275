// LaunchPage: form <-> RunSpec, preview through jobs::workerLaunchArgs, start via StoreService.
#include "widgets/launch_page.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

#include "jobs/local_launcher.h"
#include "widgets/message_bar.h"
#include "widgets/store_service.h"

namespace shard::widgets {

namespace {

QString shellQuote(const QString& s)
{
    static const QRegularExpression safe("^[A-Za-z0-9_./:=+@%-]+$");
    if (!s.isEmpty() && safe.match(s).hasMatch())
        return s;
    return "'" + QString(s).replace("'", "'\\''") + "'";
}

QComboBox* combo(QWidget* parent, const QStringList& items, const char* name)
{
    auto* c = new QComboBox(parent);
    c->setObjectName(name);
    for (const QString& i : items)
        c->addItem(i, i);
    return c;
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
    m_name = new QLineEdit("run", this);
    m_name->setObjectName("name");
    m_model = new QLineEdit(this);
    m_model->setObjectName("modelFolder");
    m_model->setPlaceholderText(tr("Hugging Face model folder (config.json + safetensors)"));
    auto* browseModel = new QPushButton(tr("Browse…"), this);
    m_data = new QLineEdit(this);
    m_data->setObjectName("data");
    m_data->setPlaceholderText(tr("train.jsonl; more.jsonl"));
    auto* browseData = new QPushButton(tr("Browse…"), this);
    m_format = combo(this, {"auto", "text", "alpaca", "chat", "tokenized"}, "format");
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
    m_strategy = combo(this, {"zero3", "zero2", "zero1", "ddp", "hybrid"}, "strategy");
    m_ranks = spin(this, 1, 1024, 1, "ranks");
    m_precision = combo(this, {"fp32", "bf16-mixed", "bf16", "fp16-mixed"}, "precision");
    m_checkpointing = combo(this, {"none", "full"}, "checkpointing");
    m_target = new QComboBox(this);
    m_target->setObjectName("target");
    m_target->addItem(tr("This machine"), "local");
    m_presets = new QComboBox(this);
    m_presets->setEditable(true);
    m_presets->setObjectName("presets");
    m_presets->lineEdit()->setPlaceholderText(tr("preset name"));
    m_savePreset = new QPushButton(tr("Sa&ve preset"), this);
    m_loadPreset = new QPushButton(tr("&Load preset"), this);
    m_start = new QPushButton(tr("&Start run"), this);
    m_start->setDefault(true);
    m_preview = new QPlainTextEdit(this);
    m_preview->setObjectName("preview");
    m_preview->setReadOnly(true);
    m_preview->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_message = new MessageBar(this);

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
    dataForm->addRow(tr("&Output folder"), m_out);
    auto* trainBox = new QGroupBox(tr("Optimisation"), this);
    auto* trainForm = new QFormLayout(trainBox);
    trainForm->addRow(tr("&Learning rate"), m_lr);
    trainForm->addRow(tr("Sc&hedule"), m_schedule);
    trainForm->addRow(tr("&Warm-up steps"), m_warmup);
    trainForm->addRow(tr("S&teps"), m_steps);
    trainForm->addRow(tr("&Epochs (if no steps)"), m_epochs);
    trainForm->addRow(tr("Check&point every"), m_ckptEvery);
    trainForm->addRow(tr("S&eed"), m_seed);
    auto* shardBox = new QGroupBox(tr("Batch and sharding"), this);
    auto* shardForm = new QFormLayout(shardBox);
    shardForm->addRow(tr("M&icro-batch"), m_microBatch);
    shardForm->addRow(tr("Se&quence length"), m_seqLen);
    shardForm->addRow(tr("Gradient acc&umulation"), m_gradAccum);
    shardForm->addRow(tr("St&rategy"), m_strategy);
    shardForm->addRow(tr("R&anks per node"), m_ranks);
    shardForm->addRow(tr("Pre&cision"), m_precision);
    shardForm->addRow(tr("Activation chec&kpointing"), m_checkpointing);
    shardForm->addRow(tr("Tar&get"), m_target);

    auto* forms = new QHBoxLayout;
    auto* col1 = new QVBoxLayout;
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

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(forms);
    layout->addLayout(presetRow);
    layout->addWidget(m_message);
    layout->addWidget(m_preview, 1);

    QWidget* order[] = {m_name, m_model, browseModel, m_data, browseData, m_format, m_out, m_lr,
        m_schedule, m_warmup, m_steps, m_epochs, m_ckptEvery, m_seed, m_microBatch, m_seqLen,
        m_gradAccum, m_strategy, m_ranks, m_precision, m_checkpointing, m_target, m_presets,
        m_loadPreset, m_savePreset, m_start, m_preview};
    for (size_t i = 1; i < std::size(order); ++i)
        setTabOrder(order[i - 1], order[i]);

    m_debounce = new QTimer(this);
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(30);
    connect(m_debounce, &QTimer::timeout, this, &LaunchPage::updatePreview);
    auto changed = [this] { m_debounce->start(); };
    for (QLineEdit* e : {m_name, m_model, m_data, m_out, m_lr})
        connect(e, &QLineEdit::textChanged, this, changed);
    for (QComboBox* c : {m_format, m_schedule, m_strategy, m_precision, m_checkpointing, m_target})
        connect(c, qOverload<int>(&QComboBox::currentIndexChanged), this, changed);
    for (QSpinBox* s : {m_warmup, m_steps, m_epochs, m_ckptEvery, m_seed, m_microBatch, m_seqLen,
             m_gradAccum, m_ranks})
        connect(s, qOverload<int>(&QSpinBox::valueChanged), this, changed);
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

void LaunchPage::setStore(StoreService* store)
{
    m_store = store;
    connect(store, &StoreService::launched, this, [this](qint64 id, const QString& dir) {
        m_start->setEnabled(true);
        m_message->showMessage(tr("Run %1 started in %2").arg(id).arg(dir), MessageBar::Kind::Info);
        m_masterPort = jobs::pickMasterPort(); // the next run gets its own port
        updatePreview();
        Q_EMIT launched(id, dir);
    });
    connect(store, &StoreService::errorOccurred, this, [this](const QString& message) {
        if (!m_start->isEnabled()) {
            m_start->setEnabled(true);
            m_message->showMessage(message);
        }
    });
}

void LaunchPage::applyPlan(const plan::PlanInput& in, const QString& modelSource)
{
    setCombo(m_strategy, plan::toString(in.strategy));
    setCombo(m_precision, plan::toString(in.precision));
    setCombo(m_checkpointing, plan::toString(in.checkpointing));
    m_microBatch->setValue(int(in.microBatch));
    m_seqLen->setValue(int(in.seqLen));
    m_gradAccum->setValue(int(in.gradAccum));
    m_ranks->setValue(int(in.gpusPerNode));
    if (QDir(modelSource).exists())
        m_model->setText(modelSource);
}

QString LaunchPage::runDirectory() const
{
    const QString root = m_out->text().trimmed().isEmpty() ? jobs::LocalLauncher::defaultRunsRoot()
                                                           : m_out->text().trimmed();
    return QDir(root).absoluteFilePath(jobs::safeDirName(m_name->text().trimmed()));
}

Result<protocol::RunSpec> LaunchPage::spec() const
{
    protocol::RunSpec s;
    s.name = m_name->text().trimmed().toStdString();
    if (s.name.empty())
        return Result<protocol::RunSpec>::failure(tr("Give the run a name."));
    s.model = m_model->text().trimmed().toStdString();
    if (s.model.empty())
        return Result<protocol::RunSpec>::failure(
            tr("Choose a model folder (a Hugging Face folder with config.json)."));
    for (const QString& f : m_data->text().split(';', Qt::SkipEmptyParts))
        if (!f.trimmed().isEmpty())
            s.data.push_back(f.trimmed().toStdString());
    if (s.data.empty())
        return Result<protocol::RunSpec>::failure(tr("Choose at least one data file."));
    s.dataFormat = m_format->currentData().toString().toStdString();
    s.outDir = runDirectory().toStdString();
    bool ok = false;
    s.lr = m_lr->text().trimmed().toDouble(&ok);
    if (!ok)
        return Result<protocol::RunSpec>::failure(
            tr("Learning rate '%1' is not a number (e.g. 3e-4).").arg(m_lr->text()));
    s.schedule = m_schedule->currentData().toString().toStdString();
    s.warmup = m_warmup->value();
    s.steps = m_steps->value();
    s.epochs = m_steps->value() > 0 ? 0 : m_epochs->value();
    s.checkpointEvery = m_ckptEvery->value();
    s.seed = uint64_t(m_seed->value());
    s.microBatch = m_microBatch->value();
    s.seqLen = m_seqLen->value();
    s.gradAccum = m_gradAccum->value();
    s.strategy = m_strategy->currentData().toString().toStdString();
    s.procsPerNode = m_ranks->value();
    s.shardGroup = s.strategy == "hybrid" ? std::max(1, m_ranks->value() / 2) : 0;
    s.precision = m_precision->currentData().toString().toStdString();
    s.checkpointing = m_checkpointing->currentData().toString().toStdString();
    try {
        protocol::validate(s);
    } catch (const std::exception& e) {
        return Result<protocol::RunSpec>::failure(QString::fromUtf8(e.what()));
    }
    return s;
}

Result<jobs::LaunchRequest> LaunchPage::request() const
{
    auto s = spec();
    if (!s)
        return Result<jobs::LaunchRequest>::failure(s.error());
    jobs::LaunchRequest r;
    r.name = QString::fromStdString(s.value().name);
    r.specJson = QByteArray::fromStdString(protocol::toJson(s.value()).dump(2));
    r.runDir = runDirectory();
    r.procsPerNode = s.value().procsPerNode;
    r.masterPort = m_masterPort;
    r.workerProgram = m_workerProgram;
    return r;
}

QString LaunchPage::commandPreview() const
{
    return m_preview->toPlainText();
}

void LaunchPage::updatePreview()
{
    m_debounce->stop();
    auto r = request();
    if (!r) {
        m_preview->setPlainText(tr("# Not ready: %1").arg(r.error()));
        m_start->setEnabled(false);
        Q_EMIT previewChanged();
        return;
    }
    const jobs::LaunchRequest& req = r.value();
    QString worker = jobs::LocalLauncher::findWorker(req.workerProgram);
    if (worker.isEmpty())
        worker = req.workerProgram;
    QStringList cmd = {worker};
    cmd << jobs::workerLaunchArgs(req, req.runDir, req.runDir, 1, 0, {}, req.masterPort);
    QStringList quoted;
    for (const QString& a : cmd)
        quoted << shellQuote(a);
    const QByteArray specJson = jobs::specWithOut(req.specJson, req.runDir);
    m_preview->setPlainText(tr("# Runs on this machine, detached (it outlives the studio):\n")
        + quoted.join(' ') + "\n\n# " + req.runDir + "/launch-spec.json\n"
        + QString::fromUtf8(specJson));
    m_start->setEnabled(m_store != nullptr);
    Q_EMIT previewChanged();
}

void LaunchPage::start()
{
    auto r = request();
    if (!r) {
        m_message->showMessage(r.error());
        return;
    }
    if (!m_store) {
        m_message->showMessage(tr("The run store is not open; runs cannot be started."));
        return;
    }
    m_start->setEnabled(false);
    m_message->showMessage(tr("Starting %1…").arg(r.value().name), MessageBar::Kind::Info);
    m_store->launchLocal(r.value());
}

void LaunchPage::toFields(const protocol::RunSpec& s)
{
    m_name->setText(QString::fromStdString(s.name));
    m_model->setText(QString::fromStdString(s.model));
    QStringList data;
    for (const auto& d : s.data)
        data << QString::fromStdString(d);
    m_data->setText(data.join("; "));
    setCombo(m_format, s.dataFormat);
    m_lr->setText(QString::number(s.lr, 'g', 6));
    setCombo(m_schedule, s.schedule);
    m_warmup->setValue(int(s.warmup));
    m_steps->setValue(int(s.steps));
    m_epochs->setValue(int(s.epochs));
    m_ckptEvery->setValue(int(s.checkpointEvery));
    m_seed->setValue(int(s.seed));
    m_microBatch->setValue(int(s.microBatch));
    m_seqLen->setValue(int(s.seqLen));
    m_gradAccum->setValue(int(s.gradAccum));
    setCombo(m_strategy, s.strategy);
    m_ranks->setValue(s.procsPerNode);
    setCombo(m_precision, s.precision);
    setCombo(m_checkpointing, s.checkpointing);
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
    s.endGroup();
}

void LaunchPage::loadSettings()
{
    QSettings s;
    s.beginGroup("launch");
    const QString last = s.value("last").toString();
    m_out->setText(s.value("runsRoot").toString());
    s.endGroup();
    if (last.isEmpty())
        return;
    try {
        toFields(protocol::runSpecFromJson(nlohmann::json::parse(last.toStdString())));
    } catch (const std::exception&) {
        // An old or hand-edited setting: start from the defaults rather than fail.
    }
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
