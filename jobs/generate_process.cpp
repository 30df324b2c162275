// Records are decoded with the protocol's own readers; a line that is not a record is passed
// over (the worker writes nothing else on stdout, but a record must never crash the studio).
#include "generate_process.h"

#include "jobs/local_launcher.h"

namespace shard::jobs {

GenerateProcess::GenerateProcess(QObject* parent)
    : QObject(parent)
{
}

GenerateProcess::~GenerateProcess()
{
    if (m_process) {
        m_process->disconnect(this);
        if (m_process->state() != QProcess::NotRunning) {
            m_process->kill();
            m_process->waitForFinished(2000);
        }
    }
}

bool GenerateProcess::isRunning() const
{
    return m_process && m_process->state() != QProcess::NotRunning;
}

bool GenerateProcess::start(const QString& worker, const QStringList& args)
{
    if (isRunning()) {
        m_error = QStringLiteral("a generation is already running");
        return false;
    }
    const QString program = LocalLauncher::findWorker(worker);
    if (program.isEmpty()) {
        m_error = QStringLiteral("cannot find shard-worker (build it, install it, or set "
                                 "$SHARD_WORKER)");
        return false;
    }
    if (m_process)
        m_process->deleteLater();
    m_process = new QProcess(this);
    m_pending.clear();
    m_stderr.clear();
    m_error.clear();
    m_cancelled = false;
    m_gotSummary = false;
    connect(m_process, &QProcess::readyReadStandardOutput, this, &GenerateProcess::readLines);
    connect(m_process, &QProcess::readyReadStandardError, this,
        [this] { m_stderr += m_process->readAllStandardError(); });
    connect(m_process, &QProcess::finished, this, &GenerateProcess::onFinished);
    m_process->start(program, QStringList {QStringLiteral("generate")} + args);
    if (!m_process->waitForStarted(10000)) {
        m_error = QStringLiteral("cannot run ") + program + QStringLiteral(": ")
            + m_process->errorString();
        return false;
    }
    return true;
}

void GenerateProcess::cancel()
{
    if (!isRunning())
        return;
    m_cancelled = true;
    m_process->kill();
}

void GenerateProcess::readLines()
{
    m_pending += m_process->readAllStandardOutput();
    int nl;
    while ((nl = m_pending.indexOf('\n')) >= 0) {
        const QByteArray line = m_pending.left(nl);
        m_pending.remove(0, nl + 1);
        if (m_cancelled)
            continue;
        const auto j = nlohmann::json::parse(
            line.constData(), line.constData() + line.size(), nullptr, false);
        if (!j.is_object())
            continue;
        const std::string type = j.value("type", "");
        try {
            if (type == "token")
                Q_EMIT token(protocol::genTokenFromJson(j));
            else if (type == "model")
                Q_EMIT modelLoaded(protocol::genModelFromJson(j));
            else if (type == "summary") {
                m_gotSummary = true;
                Q_EMIT summary(protocol::genSummaryFromJson(j));
            }
        } catch (const std::exception&) {
            // A malformed record: skipped.
        }
    }
}

void GenerateProcess::onFinished(int exitCode, QProcess::ExitStatus status)
{
    readLines();
    m_stderr += m_process->readAllStandardError();
    if (m_cancelled) {
        Q_EMIT finished(false, true, QStringLiteral("cancelled"));
        return;
    }
    if (status == QProcess::NormalExit && exitCode == 0 && m_gotSummary) {
        Q_EMIT finished(true, false, QString());
        return;
    }
    QString last;
    for (const QString& l : errorOutput().split('\n', Qt::SkipEmptyParts))
        if (!l.trimmed().isEmpty() && !l.contains(QStringLiteral("] [info]")))
            last = l.trimmed();
    if (last.isEmpty())
        last = status == QProcess::CrashExit
            ? QStringLiteral("shard-worker generate crashed")
            : QStringLiteral("shard-worker generate exited with code %1").arg(exitCode);
    Q_EMIT finished(false, false, last);
}

} // namespace shard::jobs
