// Playground page: talk to a model. Pick a model folder, a run (its exported model or newest
// checkpoint) or a checkpoint, optionally a second one to compare (base vs fine-tuned: the same
// prompt and seed go to both), write a prompt (plain or chat), set the sampling, and watch the
// answers stream with their tokens/s. Each answer comes from a `shard-worker generate` child
// process (jobs::GenerateProcess), so the studio never links Torch and never blocks; Stop kills
// the workers at once.
#pragma once

#include <array>

#include <QFutureWatcher>
#include <QStringList>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QGroupBox;

namespace shard::jobs {
class GenerateProcess;
struct RunRecord;
} // namespace shard::jobs

namespace shard::widgets {

class ExportDialog;
class MessageBar;

class PlaygroundPage : public QWidget {
    Q_OBJECT
public:
    static constexpr int kPanes = 2; // 0 = the model, 1 = the one compared with it

    explicit PlaygroundPage(QWidget* parent = nullptr);
    ~PlaygroundPage() override;

    // A model folder, a run folder or a checkpoint folder (RUN/checkpoints/step-N).
    void setModelPath(int pane, const QString& path);
    QString modelPath(int pane) const;
    void setPrompt(const QString& text);
    void setChat(bool on, const QString& system = {});
    void setMaxNewTokens(int n);
    void setIgnoreEos(bool on);
    void setSampling(double temperature, int topK, double topP, double minP, int seed);
    // The shard-worker program (default: found next to the studio or on PATH).
    void setWorkerProgram(const QString& program) { m_worker = program; }
    // Recent runs offered in the model pickers (their folders).
    void setRuns(const QStringList& runDirs);

    // The `shard-worker generate` arguments for a pane (empty when it has no model).
    QStringList workerArgs(int pane) const;

    // Export… for pane 0's model: opens the export dialog (GGUF), or says what is missing.
    // Returns the dialog (owned by the page, deleted on close) or nullptr.
    ExportDialog* openExport();

    void generate();
    void stop();
    bool isRunning() const;
    QString outputText(int pane) const;
    QString statusText(int pane) const;
    QString messageText() const;
    // What the Chat row says about the first model: which template Chat applies, or that the
    // run was fine-tuned on chat data and wants Chat on ("chatHint").
    QString chatHintText() const;
    // The Chat row's template: "" (the run's, else the tokenizer's), llama3, chatml or llama2.
    void setChatTemplate(const QString& name);
    // Whether the template Chat would use is being found (the tokenizer is read off the UI thread).
    bool checkingChat() const;

Q_SIGNALS:
    void tokenArrived(int pane);
    // Once per pane per generate(): ok, or cancelled, or failed with a message.
    void paneFinished(int pane, bool ok, bool cancelled);
    void allFinished();

private:
    struct Pane {
        QComboBox* path = nullptr;
        QPushButton* browse = nullptr;
        QGroupBox* box = nullptr;
        QPlainTextEdit* output = nullptr;
        QLabel* status = nullptr;
        jobs::GenerateProcess* process = nullptr;
        QString text;
        qint64 tokens = 0;
        qint64 startedMs = 0;
        bool running = false;
    };
    void browse(int pane);
    void updateButtons();
    // What the Chat row says of the first pane's model, found on a pool thread.
    struct ChatFacts {
        bool known = false;         // a tokenizer was found
        bool trainedOnChat = false; // its run trained on chat data
        QString templateText;       // e.g. "ChatML (the tokenizer's chat_template)"
        QString problem;            // why Chat cannot render a prompt for it ("" when it can)
    };
    static ChatFacts chatFactsOf(const QString& path, const QString& templateName);
    void checkChat();
    void updateChatHint();
    QString chatKey() const; // what ChatFacts depend on: the first pane's path and the template
    void onFinished(int pane, bool ok, bool cancelled, const QString& message);

    std::array<Pane, kPanes> m_panes;
    QString m_worker = QStringLiteral("shard-worker");
    QPlainTextEdit* m_prompt = nullptr;
    QCheckBox* m_chat = nullptr;
    QLabel* m_chatHint = nullptr;
    QComboBox* m_template = nullptr;
    QFutureWatcher<ChatFacts>* m_chatCheck = nullptr;
    QString m_chatCheckKey; // path and template of the check under way
    bool m_chatCheckAgain = false;
    ChatFacts m_chatFacts;
    QString m_chatFactsKey; // what m_chatFacts is of
    QLineEdit* m_system = nullptr;
    QDoubleSpinBox* m_temperature = nullptr;
    QSpinBox* m_topK = nullptr;
    QDoubleSpinBox* m_topP = nullptr;
    QDoubleSpinBox* m_minP = nullptr;
    QDoubleSpinBox* m_repetition = nullptr;
    QSpinBox* m_maxNew = nullptr;
    QSpinBox* m_seed = nullptr;
    QLineEdit* m_stops = nullptr;
    QComboBox* m_dtype = nullptr;
    QCheckBox* m_ignoreEos = nullptr;
    QPushButton* m_generate = nullptr;
    QPushButton* m_export = nullptr;
    QPushButton* m_stop = nullptr;
    MessageBar* m_message = nullptr;
};

} // namespace shard::widgets
