#include "widgets/export_dialog.h"

#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QVBoxLayout>

#include "jobs/local_launcher.h"

namespace shard::widgets {

namespace {

// A Hugging Face model folder itself (config.json, no checkpoint manifest).
bool isModelFolder(const QString& dir)
{
    return QFileInfo::exists(dir + QStringLiteral("/config.json"))
        && !QFileInfo::exists(dir + QStringLiteral("/manifest.json"));
}

// The model to export as GGUF: the folder itself when it is a model folder, a run's final model
// when training finished, else "" (the newest checkpoint is used).
QString finalModel(const QString& runDir)
{
    if (isModelFolder(runDir))
        return runDir;
    const QString model = QDir(runDir).filePath(QStringLiteral("model"));
    return QFileInfo::exists(model + QStringLiteral("/config.json")) ? model : QString();
}

} // namespace

ExportDialog::ExportDialog(const QString& runDir, const QString& runName, QWidget* parent)
    : QDialog(parent)
    , m_runDir(runDir)
    , m_runName(runName)
{
    setObjectName(QStringLiteral("exportDialog"));
    setWindowTitle(tr("Export model"));
    m_format = new QComboBox(this);
    m_format->setObjectName(QStringLiteral("exportFormat"));
    m_format->addItem(tr("GGUF (llama.cpp, Ollama, LM Studio)"), QStringLiteral("gguf"));
    m_format->addItem(tr("Hugging Face folder (safetensors)"), QStringLiteral("hf"));
    m_type = new QComboBox(this);
    m_type->setObjectName(QStringLiteral("exportType"));
    m_type->addItem(tr("f16 (half the size of f32, the usual choice)"), QStringLiteral("f16"));
    m_type->addItem(
        tr("q8_0 (8-bit: about half of f16, close to it in quality)"), QStringLiteral("q8_0"));
    m_type->addItem(tr("q6_k (6.6 bits a weight: about 40% of f16, near it in quality)"),
        QStringLiteral("q6_k"));
    m_type->addItem(tr("q4_k_m (4.5–5 bits a weight, Ollama's usual download; some loss)"),
        QStringLiteral("q4_k_m"));
    m_type->addItem(tr("bf16"), QStringLiteral("bf16"));
    m_type->addItem(tr("f32 (exact)"), QStringLiteral("f32"));
    m_out = new QLineEdit(this);
    m_out->setObjectName(QStringLiteral("exportOut"));
    m_browse = new QPushButton(tr("&Browse…"), this);
    m_source = new QLabel(this);
    m_source->setWordWrap(true);
    m_progress = new QProgressBar(this);
    m_progress->setObjectName(QStringLiteral("exportProgress"));
    m_progress->setRange(0, 1);
    m_progress->setValue(0);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("exportStatus"));
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_export = new QPushButton(tr("&Export"), this);
    m_export->setDefault(true);
    m_close = new QPushButton(tr("&Close"), this);

    auto* form = new QFormLayout;
    form->addRow(tr("&Format"), m_format);
    form->addRow(tr("&Type"), m_type);
    auto* outRow = new QHBoxLayout;
    outRow->addWidget(m_out, 1);
    outRow->addWidget(m_browse);
    auto* outLabel = new QLabel(tr("&Save as"), this);
    outLabel->setBuddy(m_out);
    form->addRow(outLabel, outRow);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    buttons->addWidget(m_export);
    buttons->addWidget(m_close);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_source);
    layout->addLayout(form);
    layout->addWidget(m_progress);
    layout->addWidget(m_status);
    layout->addLayout(buttons);
    setMinimumWidth(fontMetrics().averageCharWidth() * 90);

    // A new format or type proposes a new file name; finishing an export keeps the user's.
    connect(m_format, &QComboBox::currentIndexChanged, this, [this] {
        updateChoices();
        m_out->setText(defaultOutput());
    });
    connect(
        m_type, &QComboBox::currentIndexChanged, this, [this] { m_out->setText(defaultOutput()); });
    connect(m_browse, &QPushButton::clicked, this, [this] {
        const bool gguf = m_format->currentData().toString() == QLatin1String("gguf");
        const QString path = gguf
            ? QFileDialog::getSaveFileName(
                this, tr("Export as GGUF"), m_out->text(), tr("GGUF files (*.gguf)"))
            : QFileDialog::getExistingDirectory(
                this, tr("Export to a new folder"), QFileInfo(m_out->text()).path());
        if (!path.isEmpty())
            m_out->setText(path);
    });
    connect(m_export, &QPushButton::clicked, this, &ExportDialog::start);
    connect(m_close, &QPushButton::clicked, this, [this] {
        if (isRunning()) { // Cancel while it writes: the worker leaves no half file behind
            m_cancelled = true;
            m_process->kill();
            return;
        }
        reject();
    });
    updateChoices();
    m_out->setText(defaultOutput());
}

ExportDialog::~ExportDialog()
{
    if (isRunning()) {
        m_process->kill();
        m_process->waitForFinished(5000);
    }
}

QString ExportDialog::exportName() const
{
    return m_runName.isEmpty() ? QFileInfo(m_runDir).fileName() : m_runName;
}

QString ExportDialog::defaultOutput() const
{
    // A run's folder gets an export/ folder; a model folder (read-only, say) is left alone.
    const QString base = isModelFolder(m_runDir)
        ? QDir::home().filePath(QStringLiteral("shard-exports"))
        : QDir(m_runDir).filePath(QStringLiteral("export"));
    QString name = exportName();
    name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]+")), QStringLiteral("-"));
    if (m_format->currentData().toString() == QLatin1String("gguf"))
        return base + QLatin1Char('/') + name + QLatin1Char('-') + m_type->currentData().toString()
            + QStringLiteral(".gguf");
    return base + QLatin1Char('/') + name + QStringLiteral("-hf");
}

void ExportDialog::updateChoices()
{
    const bool gguf = m_format->currentData().toString() == QLatin1String("gguf");
    m_type->setEnabled(gguf);
    const QString model = finalModel(m_runDir);
    m_export->setEnabled(gguf || !isModelFolder(m_runDir));
    if (isModelFolder(m_runDir))
        m_source->setText(gguf ? tr("From the model folder %1.").arg(m_runDir)
                               : tr("%1 is already a Hugging Face folder: there is nothing to "
                                    "export in that format.")
                                     .arg(m_runDir));
    else if (gguf)
        m_source->setText(model.isEmpty()
                ? tr("From the run's newest checkpoint (LoRA adapters merged into the base).")
                : tr("From the run's final model (%1).").arg(model));
    else
        m_source->setText(model.isEmpty()
                ? tr("From the run's newest checkpoint (a LoRA run: its PEFT adapter folder).")
                : tr("From the run's newest checkpoint. The final model is already a Hugging "
                     "Face folder: %1")
                      .arg(model));
}

QStringList ExportDialog::workerArguments() const
{
    QStringList args {QStringLiteral("export")};
    const QString out = m_out->text().trimmed();
    if (m_format->currentData().toString() == QLatin1String("gguf")) {
        const QString model = finalModel(m_runDir);
        args << QStringLiteral("--format") << QStringLiteral("gguf");
        if (!model.isEmpty())
            args << QStringLiteral("--model") << model;
        else
            args << QStringLiteral("--checkpoint") << m_runDir;
        args << QStringLiteral("--type") << m_type->currentData().toString();
        args << QStringLiteral("--name") << exportName();
    } else {
        args << QStringLiteral("--checkpoint") << m_runDir;
    }
    args << QStringLiteral("--out") << out;
    return args;
}

QString ExportDialog::statusText() const
{
    return m_status->text();
}

bool ExportDialog::isRunning() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

void ExportDialog::start()
{
    if (isRunning())
        return;
    const QString out = m_out->text().trimmed();
    if (out.isEmpty()) {
        m_status->setText(tr("Choose where to save the export."));
        return;
    }
    if (QFileInfo::exists(out)) {
        m_status->setText(tr("%1 already exists: choose another name.").arg(out));
        return;
    }
    const QString worker = jobs::LocalLauncher::findWorker(m_worker);
    if (worker.isEmpty()) {
        m_status->setText(tr("shard-worker was not found (next to the studio or on the PATH)."));
        return;
    }
    QDir().mkpath(QFileInfo(out).path());
    m_stderr.clear();
    m_cancelled = false;
    delete m_process;
    m_process = new QProcess(this);
    connect(m_process, &QProcess::readyReadStandardError, this, &ExportDialog::readProgress);
    connect(m_process, &QProcess::finished, this, &ExportDialog::onFinished);
    m_progress->setRange(0, 0); // busy until the first tensor is written
    m_status->setText(tr("Exporting…"));
    m_export->setEnabled(false);
    m_format->setEnabled(false);
    m_type->setEnabled(false);
    m_close->setText(tr("&Cancel"));
    m_process->start(worker, workerArguments());
}

void ExportDialog::readProgress()
{
    m_stderr += m_process->readAllStandardError();
    static const QRegularExpression tensor(QStringLiteral("export: tensor (\\d+)/(\\d+)"));
    QRegularExpressionMatch last;
    for (auto it = tensor.globalMatch(QString::fromUtf8(m_stderr)); it.hasNext();)
        last = it.next();
    if (last.hasMatch()) {
        m_progress->setRange(0, last.captured(2).toInt());
        m_progress->setValue(last.captured(1).toInt());
    }
}

void ExportDialog::onFinished(int exitCode, QProcess::ExitStatus status)
{
    readProgress();
    m_format->setEnabled(true);
    updateChoices(); // the export button and the type, as the format allows
    m_close->setText(tr("&Close"));
    const bool ok = status == QProcess::NormalExit && exitCode == 0;
    const QString out = m_out->text();
    if (ok) {
        m_progress->setRange(0, 1);
        m_progress->setValue(1);
        const bool gguf = out.endsWith(QLatin1String(".gguf"));
        QString text = tr("Exported to %1.").arg(out);
        if (gguf)
            text += QLatin1Char(' ')
                + tr("Run it with llama.cpp (llama-cli -m %1) or Ollama (ollama create NAME -f "
                     "%2).")
                      .arg(out,
                          QFileInfo(out).path() + QLatin1Char('/')
                              + QFileInfo(out).completeBaseName() + QStringLiteral(".Modelfile"));
        m_status->setText(text);
    } else {
        m_progress->setRange(0, 1);
        m_progress->setValue(0);
        QString reason;
        for (const QString& line : QString::fromUtf8(m_stderr).split(QLatin1Char('\n')))
            if (line.contains(QLatin1String("error")))
                reason = line.trimmed();
        if (m_cancelled) { // the killed worker's work files
            QFile::remove(out + QStringLiteral(".partial"));
            QDir(out + QStringLiteral(".hf-tmp")).removeRecursively();
            QDir(out + QStringLiteral(".tmp")).removeRecursively();
        }
        m_status->setText(m_cancelled
                ? tr("Cancelled: nothing was written under %1.").arg(out)
                : tr("The export failed: %1")
                      .arg(reason.isEmpty() ? tr("exit code %1").arg(exitCode) : reason));
    }
    Q_EMIT finished(ok);
}

} // namespace shard::widgets
