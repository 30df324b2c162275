// PlaygroundPage: the form, one GenerateProcess per pane, text appended as token records arrive.
#include "widgets/playground_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTextCursor>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "jobs/generate_process.h"
#include "protocol/checkpoint_discovery.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "widgets/export_dialog.h"
#include "widgets/message_bar.h"

namespace shard::widgets {

namespace {

QDoubleSpinBox* doubleSpin(
    QWidget* parent, double lo, double hi, double step, double value, const char* name)
{
    auto* s = new QDoubleSpinBox(parent);
    s->setObjectName(name);
    s->setRange(lo, hi);
    s->setSingleStep(step);
    s->setDecimals(2);
    s->setValue(value);
    return s;
}

QSpinBox* intSpin(QWidget* parent, int lo, int hi, int value, const char* name)
{
    auto* s = new QSpinBox(parent);
    s->setObjectName(name);
    s->setRange(lo, hi);
    s->setValue(value);
    return s;
}

QString number(double v)
{
    return QString::number(v, 'g', 6);
}

QJsonObject readJsonObject(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

} // namespace

PlaygroundPage::PlaygroundPage(QWidget* parent)
    : QWidget(parent)
{
    const QStringList titles = {tr("Model"), tr("Compare with (optional)")};
    const QStringList hints = {tr("model folder, run folder or checkpoint (…/checkpoints/step-N)"),
        tr("e.g. the fine-tuned run, with the same prompt and seed")};
    auto* models = new QFormLayout;
    for (int i = 0; i < kPanes; ++i) {
        Pane& p = m_panes[size_t(i)];
        p.path = new QComboBox(this);
        p.path->setEditable(true);
        p.path->setObjectName(i == 0 ? "modelPath" : "compareModelPath");
        p.path->lineEdit()->setPlaceholderText(hints[i]);
        p.path->setInsertPolicy(QComboBox::NoInsert);
        p.browse = new QPushButton(tr("Browse…"), this);
        auto* row = new QHBoxLayout;
        row->addWidget(p.path, 1);
        row->addWidget(p.browse);
        if (i == 0) {
            // GGUF for llama.cpp / Ollama of the model being tried (Runs has the same dialog).
            m_export = new QPushButton(tr("E&xport…"), this);
            m_export->setObjectName("exportModel");
            m_export->setToolTip(tr("Save this model as a GGUF file for llama.cpp, Ollama or "
                                    "LM Studio"));
            row->addWidget(m_export);
            connect(m_export, &QPushButton::clicked, this, [this] { openExport(); });
        }
        auto* label = new QLabel(titles[i], this);
        label->setBuddy(p.path);
        models->addRow(label, row);
        connect(p.browse, &QPushButton::clicked, this, [this, i] { browse(i); });

        p.box = new QGroupBox(i == 0 ? tr("Answer") : tr("Compared answer"), this);
        p.output = new QPlainTextEdit(p.box);
        p.output->setObjectName(i == 0 ? "output" : "compareOutput");
        p.output->setReadOnly(true);
        p.status = new QLabel(p.box);
        p.status->setObjectName(i == 0 ? "status" : "compareStatus");
        p.status->setTextInteractionFlags(Qt::TextSelectableByMouse);
        // Wraps: one line of token stats made the window at least 1162 px wide.
        p.status->setWordWrap(true);
        auto* v = new QVBoxLayout(p.box);
        v->addWidget(p.output, 1);
        v->addWidget(p.status);

        p.process = new jobs::GenerateProcess(this);
        connect(p.process, &jobs::GenerateProcess::token, this,
            [this, i](const protocol::GenTokenRecord& t) {
                Pane& q = m_panes[size_t(i)];
                ++q.tokens;
                q.text += QString::fromStdString(t.text);
                q.output->moveCursor(QTextCursor::End);
                q.output->insertPlainText(QString::fromStdString(t.text));
                const double sec
                    = std::max<qint64>(1, QDateTime::currentMSecsSinceEpoch() - q.startedMs)
                    / 1000.0;
                q.status->setText(
                    tr("%1 tokens, %2 tok/s so far").arg(q.tokens).arg(q.tokens / sec, 0, 'f', 1));
                Q_EMIT tokenArrived(i);
            });
        connect(p.process, &jobs::GenerateProcess::modelLoaded, this,
            [this, i](const protocol::GenModelRecord& m) {
                m_panes[size_t(i)].status->setText(
                    tr("loaded %1 (%2 parameters, %3) in %4 s")
                        .arg(QFileInfo(QString::fromStdString(m.model)).fileName())
                        .arg(m.params)
                        .arg(QString::fromStdString(m.dtype))
                        .arg(m.loadSec, 0, 'f', 2));
            });
        connect(p.process, &jobs::GenerateProcess::summary, this,
            [this, i](const protocol::GenSummaryRecord& s) {
                Pane& q = m_panes[size_t(i)];
                const QString tail = QString::fromStdString(s.tail);
                q.text += tail;
                q.output->moveCursor(QTextCursor::End);
                q.output->insertPlainText(tail);
                q.status->setText(
                    tr("%1 tokens (stop: %2) · prompt %3 tokens at %4 tok/s · decode %5 tok/s")
                        .arg(s.tokens)
                        .arg(QString::fromStdString(s.stopReason))
                        .arg(s.promptTokens)
                        .arg(s.prefillTokensPerSec, 0, 'f', 0)
                        .arg(s.decodeTokensPerSec, 0, 'f', 1));
            });
        connect(p.process, &jobs::GenerateProcess::finished, this,
            [this, i](bool ok, bool cancelled, const QString& message) {
                onFinished(i, ok, cancelled, message);
            });
    }

    m_prompt = new QPlainTextEdit(this);
    m_prompt->setObjectName("prompt");
    m_prompt->setPlaceholderText(tr("Prompt (empty: start from BOS)"));
    m_prompt->setMaximumHeight(110);
    m_chat = new QCheckBox(tr("&Chat"), this);
    m_chat->setObjectName("chat");
    m_chat->setToolTip(tr("Wrap the prompt in a chat template as one user turn (after the system "
                          "prompt, when there is one)"));
    m_template = new QComboBox(this);
    m_template->setObjectName("chatTemplate");
    m_template->addItem(tr("template: the run's or tokenizer's"), QString());
    m_template->addItem(QStringLiteral("Llama 3"), QStringLiteral("llama3"));
    m_template->addItem(QStringLiteral("ChatML"), QStringLiteral("chatml"));
    m_template->addItem(QStringLiteral("Llama 2 [INST]"), QStringLiteral("llama2"));
    m_template->setToolTip(tr("The chat template Chat renders the prompt with: by default the one "
                              "the run was trained with, else the tokenizer's"));
    m_template->setEnabled(false);
    connect(m_chat, &QCheckBox::toggled, m_template, &QWidget::setEnabled);
    m_system = new QLineEdit(this);
    m_system->setObjectName("systemPrompt");
    m_system->setPlaceholderText(tr("system prompt (chat)"));
    m_system->setEnabled(false);
    connect(m_chat, &QCheckBox::toggled, m_system, &QWidget::setEnabled);
    m_chatHint = new QLabel(this);
    m_chatHint->setObjectName("chatHint");
    m_chatHint->setWordWrap(true);
    m_chatHint->hide();
    connect(m_chat, &QCheckBox::toggled, this, &PlaygroundPage::updateChatHint);
    m_chatCheck = new QFutureWatcher<ChatFacts>(this);
    connect(m_chatCheck, &QFutureWatcher<ChatFacts>::finished, this, [this] {
        m_chatFacts = m_chatCheck->result();
        m_chatFactsKey = m_chatCheckKey;
        if (m_chatCheckAgain) {
            m_chatCheckAgain = false;
            checkChat();
        }
        updateChatHint();
    });
    connect(m_template, &QComboBox::currentIndexChanged, this, &PlaygroundPage::checkChat);

    m_temperature = doubleSpin(this, 0.0, 5.0, 0.1, 0.8, "temperature");
    m_temperature->setSpecialValueText(tr("0 (greedy)"));
    m_topK = intSpin(this, 0, 1000000, 40, "topK");
    m_topK->setSpecialValueText(tr("off"));
    m_topP = doubleSpin(this, 0.01, 1.0, 0.05, 0.95, "topP");
    m_minP = doubleSpin(this, 0.0, 0.99, 0.01, 0.0, "minP");
    m_minP->setSpecialValueText(tr("off"));
    m_repetition = doubleSpin(this, 0.5, 3.0, 0.05, 1.0, "repetitionPenalty");
    m_maxNew = intSpin(this, 1, 1 << 20, 200, "maxNewTokens");
    m_seed = intSpin(this, 0, 2147483647, 0, "seed");
    m_stops = new QLineEdit(this);
    m_stops->setObjectName("stopStrings");
    m_stops->setPlaceholderText(tr("stop strings, separated by |"));
    m_dtype = new QComboBox(this);
    m_dtype->setObjectName("dtype");
    m_dtype->addItems({"fp32", "bf16"});
    m_ignoreEos = new QCheckBox(tr("Ignore EOS"), this);
    m_ignoreEos->setObjectName("ignoreEos");

    m_generate = new QPushButton(tr("&Generate"), this);
    m_generate->setObjectName("generate");
    m_generate->setDefault(true);
    m_stop = new QPushButton(tr("S&top"), this);
    m_stop->setObjectName("stop");
    m_message = new MessageBar(this);
    connect(m_generate, &QPushButton::clicked, this, &PlaygroundPage::generate);
    connect(m_stop, &QPushButton::clicked, this, &PlaygroundPage::stop);

    auto* sampling = new QGroupBox(tr("Sampling"), this);
    auto* grid = new QFormLayout(sampling);
    grid->addRow(tr("Temperature"), m_temperature);
    grid->addRow(tr("Top-k"), m_topK);
    grid->addRow(tr("Top-p"), m_topP);
    grid->addRow(tr("Min-p"), m_minP);
    grid->addRow(tr("Repetition penalty"), m_repetition);
    grid->addRow(tr("Max new tokens"), m_maxNew);
    grid->addRow(tr("Seed"), m_seed);
    grid->addRow(tr("Stop strings"), m_stops);
    grid->addRow(tr("Precision"), m_dtype);
    grid->addRow(QString(), m_ignoreEos);

    auto* promptBox = new QGroupBox(tr("Prompt"), this);
    auto* pv = new QVBoxLayout(promptBox);
    pv->addWidget(m_prompt);
    auto* chatRow = new QHBoxLayout;
    chatRow->addWidget(m_chat);
    chatRow->addWidget(m_template);
    chatRow->addWidget(m_system, 1);
    pv->addLayout(chatRow);
    pv->addWidget(m_chatHint);
    auto* buttons = new QHBoxLayout;
    buttons->addStretch(1);
    buttons->addWidget(m_stop);
    buttons->addWidget(m_generate);
    pv->addLayout(buttons);

    auto* left = new QVBoxLayout;
    left->addLayout(models);
    left->addWidget(promptBox);
    auto* top = new QHBoxLayout;
    top->addLayout(left, 3);
    top->addWidget(sampling, 1);
    auto* answers = new QHBoxLayout;
    for (auto& p : m_panes)
        answers->addWidget(p.box, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(m_message);
    layout->addLayout(answers, 1);
    connect(m_panes[1].path, &QComboBox::editTextChanged, this, [this] { updateButtons(); });
    connect(m_panes[0].path, &QComboBox::editTextChanged, this, &PlaygroundPage::checkChat);
    updateButtons();
}

// The run folder of a path (the path itself, its parent: <run>/model, or two up:
// <run>/checkpoints/step-N), as `shard-worker generate` finds it; the tokenizer it reads (the
// folder's own, else the run's exported model's, its --tokenizer's or its base model's); the
// template it would render a chat with (this row's choice, else the run's, else the
// tokenizer's: tokenizer::chooseChatTemplate, the engine's own choice).
PlaygroundPage::ChatFacts PlaygroundPage::chatFactsOf(
    const QString& path, const QString& templateName)
{
    ChatFacts facts;
    if (path.isEmpty())
        return facts;
    const QString runDir = QString::fromStdString(protocol::runFolderOf(path.toStdString()));
    const QJsonObject run = runDir.isEmpty() ? QJsonObject() : readJsonObject(runDir + "/run.json");
    const QString trained = run.value("chat_template").toString();
    QStringList folders {path};
    if (!runDir.isEmpty())
        folders << runDir + "/model" << run.value("tokenizer").toString()
                << run.value("model").toString();
    for (const QString& folder : folders) {
        if (folder.isEmpty() || !QFileInfo::exists(folder + "/tokenizer.json"))
            continue;
        facts.known = true;
        const QString chosen = !templateName.isEmpty() ? templateName : trained;
        try {
            const auto tok = tokenizer::Tokenizer::fromFolder(folder.toStdString());
            const auto choice = tokenizer::chooseChatTemplate(tok, chosen.toStdString());
            QString source = QString::fromStdString(choice.source);
            if (!templateName.isEmpty())
                source = tr("chosen here");
            else if (!trained.isEmpty())
                source = tr("the run was trained with it: --chat-template %1").arg(trained);
            facts.templateText
                = tr("%1 template (%2)")
                      .arg(QString::fromStdString(tokenizer::chatTemplateTitle(choice.kind)))
                      .arg(source);
        } catch (const std::exception& e) {
            // The engine's reason up to its fix, which names a CLI flag; the row's is Template.
            const QString why = QString::fromUtf8(e.what()).section(';', 0, 0);
            facts.problem = tr("Chat cannot wrap a prompt for this model: %1. Choose a template "
                               "in the list beside Chat.")
                                .arg(why);
        }
        break;
    }
    // Trained on chat: a chat format or template named, or chat records in its first data file.
    const QString format = run.value("data_format").toString();
    facts.trainedOnChat = format == QLatin1String("chat") || !trained.isEmpty();
    const QJsonArray data = run.value("data").toArray();
    if (!facts.trainedOnChat && format == QLatin1String("auto") && !data.isEmpty()) {
        QFile f(data.first().toString());
        if (f.open(QIODevice::ReadOnly)) {
            const QJsonObject first = QJsonDocument::fromJson(f.readLine()).object();
            facts.trainedOnChat = first.contains("messages") || first.contains("conversations");
        }
    }
    return facts;
}

void PlaygroundPage::checkChat()
{
    const QString path = modelPath(0), name = m_template->currentData().toString();
    const QString key = chatKey();
    if (m_chatCheck->isRunning()) {
        m_chatCheckAgain = key != m_chatCheckKey;
        return;
    }
    if (key == m_chatFactsKey)
        return;
    m_chatCheckKey = key;
    m_chatCheck->setFuture(QtConcurrent::run([path, name] { return chatFactsOf(path, name); }));
    updateChatHint();
}

QString PlaygroundPage::chatKey() const
{
    return modelPath(0) + QLatin1Char('\n') + m_template->currentData().toString();
}

bool PlaygroundPage::checkingChat() const
{
    return m_chatCheck->isRunning();
}

void PlaygroundPage::setChatTemplate(const QString& name)
{
    const int i = m_template->findData(name);
    m_template->setCurrentIndex(i < 0 ? 0 : i);
}

void PlaygroundPage::updateChatHint()
{
    const QString key = chatKey();
    // Facts of another path or template say nothing until this one's are found.
    const ChatFacts facts = key == m_chatFactsKey ? m_chatFacts : ChatFacts {};
    QString hint;
    if (facts.known && !m_chat->isChecked() && facts.trainedOnChat)
        hint = tr("This run was fine-tuned on chat data: turn on Chat so that the prompt is "
                  "wrapped in the template it learned (a plain prompt may get no answer).");
    else if (facts.known && m_chat->isChecked())
        hint = facts.problem.isEmpty() ? tr("Chat uses the %1.").arg(facts.templateText)
                                       : facts.problem;
    m_chatHint->setText(hint);
    m_chatHint->setVisible(!hint.isEmpty());
}

QString PlaygroundPage::chatHintText() const
{
    return m_chatHint->text();
}

PlaygroundPage::~PlaygroundPage() = default;

void PlaygroundPage::setModelPath(int pane, const QString& path)
{
    m_panes.at(size_t(pane)).path->setEditText(path);
}

QString PlaygroundPage::modelPath(int pane) const
{
    return m_panes.at(size_t(pane)).path->currentText().trimmed();
}

void PlaygroundPage::setPrompt(const QString& text)
{
    m_prompt->setPlainText(text);
}

void PlaygroundPage::setChat(bool on, const QString& system)
{
    m_chat->setChecked(on);
    m_system->setText(system);
}

void PlaygroundPage::setMaxNewTokens(int n)
{
    m_maxNew->setValue(n);
}

void PlaygroundPage::setIgnoreEos(bool on)
{
    m_ignoreEos->setChecked(on);
}

void PlaygroundPage::setSampling(double temperature, int topK, double topP, double minP, int seed)
{
    m_temperature->setValue(temperature);
    m_topK->setValue(topK);
    m_topP->setValue(topP);
    m_minP->setValue(minP);
    m_seed->setValue(seed);
}

void PlaygroundPage::setRuns(const QStringList& runDirs)
{
    for (auto& p : m_panes) {
        const QString current = p.path->currentText();
        p.path->clear();
        p.path->addItems(runDirs);
        p.path->setEditText(current);
    }
}

QStringList PlaygroundPage::workerArgs(int pane) const
{
    const QString path = modelPath(pane);
    if (path.isEmpty())
        return {};
    // A checkpoint folder holds a manifest; model and run folders go to --model.
    const bool checkpoint = QFileInfo::exists(QDir(path).filePath(QStringLiteral("manifest.json")));
    QStringList a = {checkpoint ? QStringLiteral("--checkpoint") : QStringLiteral("--model"), path,
        QStringLiteral("--prompt"), m_prompt->toPlainText(), QStringLiteral("--max-new-tokens"),
        QString::number(m_maxNew->value()), QStringLiteral("--temperature"),
        number(m_temperature->value()), QStringLiteral("--top-k"), QString::number(m_topK->value()),
        QStringLiteral("--top-p"), number(m_topP->value()), QStringLiteral("--min-p"),
        number(m_minP->value()), QStringLiteral("--repetition-penalty"),
        number(m_repetition->value()), QStringLiteral("--seed"), QString::number(m_seed->value()),
        QStringLiteral("--dtype"), m_dtype->currentText()};
    if (m_chat->isChecked()) {
        a << QStringLiteral("--chat");
        if (const QString t = m_template->currentData().toString(); !t.isEmpty())
            a << QStringLiteral("--chat-template") << t;
        if (!m_system->text().isEmpty())
            a << QStringLiteral("--system") << m_system->text();
    }
    if (m_ignoreEos->isChecked())
        a << QStringLiteral("--ignore-eos");
    for (const QString& s : m_stops->text().split('|', Qt::SkipEmptyParts))
        a << QStringLiteral("--stop") << s;
    return a;
}

void PlaygroundPage::generate()
{
    if (isRunning())
        return;
    m_message->clearMessage();
    if (modelPath(0).isEmpty()) {
        m_message->showMessage(tr("Choose a model first: a model folder, a run folder or a "
                                  "checkpoint folder."));
        return;
    }
    for (int i = 0; i < kPanes; ++i) {
        Pane& p = m_panes[size_t(i)];
        p.output->clear();
        p.text.clear();
        p.tokens = 0;
        const QStringList args = workerArgs(i);
        if (args.isEmpty()) {
            p.status->clear();
            continue;
        }
        p.startedMs = QDateTime::currentMSecsSinceEpoch();
        p.status->setText(tr("loading…"));
        p.running = p.process->start(m_worker, args);
        if (!p.running) {
            p.status->setText(p.process->error());
            m_message->showMessage(p.process->error());
        }
    }
    updateButtons();
}

void PlaygroundPage::stop()
{
    for (auto& p : m_panes)
        p.process->cancel();
}

bool PlaygroundPage::isRunning() const
{
    for (const auto& p : m_panes)
        if (p.running)
            return true;
    return false;
}

QString PlaygroundPage::outputText(int pane) const
{
    return m_panes.at(size_t(pane)).text;
}

QString PlaygroundPage::statusText(int pane) const
{
    return m_panes.at(size_t(pane)).status->text();
}

QString PlaygroundPage::messageText() const
{
    return m_message->text();
}

void PlaygroundPage::onFinished(int pane, bool ok, bool cancelled, const QString& message)
{
    Pane& p = m_panes[size_t(pane)];
    p.running = false;
    if (cancelled)
        p.status->setText(tr("stopped after %1 tokens").arg(p.tokens));
    else if (!ok) {
        p.status->setText(tr("failed"));
        m_message->showMessage(message);
    }
    updateButtons();
    Q_EMIT paneFinished(pane, ok, cancelled);
    if (!isRunning())
        Q_EMIT allFinished();
}

ExportDialog* PlaygroundPage::openExport()
{
    const QString path = modelPath(0);
    if (path.isEmpty() || !QFileInfo(path).isDir()) {
        m_message->showMessage(path.isEmpty()
                ? tr("Choose a model folder, a run or a checkpoint to export.")
                : tr("%1 is not a folder on this machine.").arg(path),
            MessageBar::Kind::Info);
        return nullptr;
    }
    auto* dialog = new ExportDialog(path, QFileInfo(path).fileName(), this);
    dialog->setWorkerProgram(m_worker);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->open();
    return dialog;
}

void PlaygroundPage::browse(int pane)
{
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("A model folder, a run folder or a checkpoint folder"), modelPath(pane));
    if (!dir.isEmpty())
        setModelPath(pane, dir);
}

void PlaygroundPage::updateButtons()
{
    const bool running = isRunning();
    m_generate->setEnabled(!running);
    m_stop->setEnabled(running);
    m_panes[1].box->setVisible(!modelPath(1).isEmpty());
}

} // namespace shard::widgets
