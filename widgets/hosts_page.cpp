// HostsPage: host list, edit form, connection tests on a pool thread through the SSH launcher.
#include "widgets/hosts_page.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpressionValidator>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "jobs/local_launcher.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "widgets/message_bar.h"

namespace shard::widgets {

namespace {
constexpr int kConnectTimeoutSec = 8;

// The same machine and login (what a Test found there belongs to it).
bool sameLogin(const HostEntry& a, const HostEntry& b)
{
    return a.kind == b.kind && a.address == b.address && a.port == b.port && a.user == b.user;
}
} // namespace

HostsPage::HostsPage(QWidget* parent)
    : QWidget(parent)
{
    m_table = new QTableWidget(this);
    m_table->setColumnCount(6);
    m_table->setHorizontalHeaderLabels(
        {tr("name"), tr("kind"), tr("address"), tr("user"), tr("partition"), tr("GPUs")});
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setAccessibleName(tr("Hosts"));

    m_name = new QLineEdit(this);
    m_name->setPlaceholderText(tr("e.g. gpu-box"));
    m_kind = new QComboBox(this);
    m_kind->addItem(tr("SSH host"), "ssh");
    m_kind->addItem(tr("Slurm cluster"), "slurm");
    m_address = new QLineEdit(this);
    m_address->setPlaceholderText(tr("host name or ~/.ssh/config alias (empty: this machine)"));
    m_port = new QSpinBox(this);
    m_port->setRange(1, 65535);
    m_port->setValue(22);
    m_user = new QLineEdit(this);
    m_user->setPlaceholderText(tr("default from ~/.ssh/config"));
    m_partition = new QLineEdit(this);
    m_partition->setPlaceholderText(tr("Slurm partition (optional)"));
    m_timeLimit = new QLineEdit(this);
    m_timeLimit->setObjectName("timeLimit");
    m_timeLimit->setPlaceholderText(tr("e.g. 02:00:00 or 1-12:00:00 (empty: the partition's)"));
    m_timeLimit->setValidator(new QRegularExpressionValidator(
        QRegularExpression(QString::fromLatin1(jobs::kSlurmTimePattern)), m_timeLimit));
    m_timeLimit->setToolTip(tr("The jobs' time limit (#SBATCH --time): minutes, MM:SS, HH:MM:SS, "
                               "D-HH, D-HH:MM or D-HH:MM:SS."));
    m_preemptSignal = new QSpinBox(this);
    m_preemptSignal->setObjectName("preemptSignal");
    m_preemptSignal->setRange(0, 86400);
    m_preemptSignal->setValue(jobs::kDefaultPreemptSignalSec);
    m_preemptSignal->setSuffix(tr(" s before the limit"));
    m_preemptSignal->setSpecialValueText(tr("off"));
    m_preemptSignal->setToolTip(
        tr("Slurm sends SIGUSR1 this long before the time limit (or a preemption): every rank "
           "writes a checkpoint and stops, and the job requeues itself to continue from it "
           "(--signal=USR1@N). Give at least the checkpoint's write time the Monitor shows."));
    m_save = new QPushButton(tr("&Save host"), this);
    m_remove = new QPushButton(tr("&Remove"), this);
    m_test = new QPushButton(tr("&Test connection"), this);
    m_cancel = new QPushButton(tr("Cancel test"), this);
    m_cancel->setEnabled(false);
    m_plan = new QPushButton(tr("&Plan for these GPUs"), this);
    m_plan->setObjectName("planForHost");
    m_plan->setToolTip(tr("Opens the Plan page with this host's GPU model and count, as its last "
                          "Test found them."));
    m_plan->setEnabled(false);
    m_doctor = new QPushButton(tr("&Doctor"), this);
    m_doctor->setObjectName("doctorHost");
    m_doctor->setToolTip(tr("What the selected host can train with (driver, GPUs, CUDA, NCCL, "
                            "cuDNN, the worker's LibTorch), and the command that fixes each "
                            "missing piece: `shard doctor` run there."));
    m_doctorLocal = new QPushButton(tr("Doctor: this &machine"), this);
    m_doctorLocal->setObjectName("doctorLocal");
    m_doctorLocal->setToolTip(tr("The same checks for this machine (`shard doctor`)."));
    m_doctorView = new QTextBrowser(this);
    m_doctorView->setObjectName("doctorReport");
    m_doctorView->setAccessibleName(tr("Doctor report"));
    m_doctorView->setOpenLinks(false);
    m_doctorView->setPlaceholderText(
        tr("Doctor: choose a host and press Doctor, or Doctor: this machine, to see what it can "
           "train with and how to fix what is missing."));
    m_busy = new QProgressBar(this);
    m_busy->setRange(0, 0);
    m_busy->setVisible(false);
    m_busy->setMaximumWidth(160);
    m_message = new MessageBar(this);

    auto* form = new QFormLayout;
    form->addRow(tr("&Name"), m_name);
    form->addRow(tr("&Kind"), m_kind);
    form->addRow(tr("&Address"), m_address);
    form->addRow(tr("&Port"), m_port);
    form->addRow(tr("&User"), m_user);
    form->addRow(tr("Partitio&n"), m_partition);
    form->addRow(tr("T&ime limit"), m_timeLimit);
    form->addRow(tr("Checkpoint and re&queue"), m_preemptSignal);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_save);
    buttons->addWidget(m_remove);
    buttons->addStretch(1);
    buttons->addWidget(m_busy);
    buttons->addWidget(m_test);
    buttons->addWidget(m_cancel);
    buttons->addWidget(m_plan);
    auto* doctorButtons = new QHBoxLayout;
    doctorButtons->addWidget(m_doctor);
    doctorButtons->addWidget(m_doctorLocal);
    doctorButtons->addStretch(1);

    auto* help = new QLabel(tr("Connections use your OpenSSH client, so ~/.ssh/config, agents, "
                               "ProxyJump and known hosts apply. Host keys are checked by "
                               "OpenSSH; a new or changed key must be accepted in a terminal."),
        this);
    help->setWordWrap(true);

    auto* formBox = new QWidget(this);
    auto* formColumn = new QVBoxLayout(formBox);
    formColumn->setContentsMargins(0, 0, 0, 0);
    formColumn->addLayout(form);
    formColumn->addLayout(buttons);
    formColumn->addLayout(doctorButtons);
    formBox->setMaximumWidth(720);
    auto* lower = new QHBoxLayout;
    lower->addWidget(formBox);
    lower->addWidget(m_doctorView, 2);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_table, 1);
    layout->addWidget(m_message);
    layout->addLayout(lower, 2);
    layout->addWidget(help);

    setTabOrder(m_table, m_name);
    setTabOrder(m_name, m_kind);
    setTabOrder(m_kind, m_address);
    setTabOrder(m_address, m_port);
    setTabOrder(m_port, m_user);
    setTabOrder(m_user, m_partition);
    setTabOrder(m_partition, m_timeLimit);
    setTabOrder(m_timeLimit, m_preemptSignal);
    setTabOrder(m_preemptSignal, m_save);
    setTabOrder(m_save, m_remove);
    setTabOrder(m_remove, m_test);
    setTabOrder(m_test, m_cancel);
    setTabOrder(m_cancel, m_plan);
    setTabOrder(m_plan, m_doctor);
    setTabOrder(m_doctor, m_doctorLocal);
    setTabOrder(m_doctorLocal, m_doctorView);

    connect(m_table, &QTableWidget::currentCellChanged, this, [this](int row) {
        fillForm(row);
        updatePlanButton();
    });
    const auto slurmFields = [this] {
        const bool slurm = m_kind->currentData().toString() == "slurm";
        for (QWidget* w :
            std::initializer_list<QWidget*> {m_partition, m_timeLimit, m_preemptSignal})
            w->setEnabled(slurm);
    };
    connect(m_kind, qOverload<int>(&QComboBox::currentIndexChanged), this, slurmFields);
    slurmFields();
    connect(m_save, &QPushButton::clicked, this, [this] {
        const HostEntry e = formEntry();
        if (e.name.isEmpty()) {
            m_message->showMessage(tr("Give the host a name first."));
            return;
        }
        if (e.kind == "ssh" && e.address.isEmpty()) {
            m_message->showMessage(tr("An SSH host needs an address (a host name or an alias "
                                      "from ~/.ssh/config)."));
            return;
        }
        m_message->clearMessage();
        addHost(e);
        saveSettings();
    });
    connect(m_remove, &QPushButton::clicked, this, [this] {
        const int row = m_table->currentRow();
        if (row < 0 || row >= m_hosts.size())
            return;
        m_hosts.removeAt(row);
        refreshTable();
        saveSettings();
        Q_EMIT hostsChanged();
    });
    connect(m_test, &QPushButton::clicked, this, &HostsPage::testSelected);
    connect(m_cancel, &QPushButton::clicked, this, &HostsPage::cancelTest);
    connect(m_plan, &QPushButton::clicked, this, &HostsPage::planForSelected);
    connect(m_doctor, &QPushButton::clicked, this, &HostsPage::doctorSelected);
    connect(m_doctorLocal, &QPushButton::clicked, this, &HostsPage::doctorThisMachine);
}

QString HostsPage::messageText() const
{
    return m_message->text();
}

void HostsPage::setHosts(const QList<HostEntry>& hosts)
{
    m_hosts = hosts;
    refreshTable();
}

void HostsPage::addHost(const HostEntry& host)
{
    int row = -1;
    for (int i = 0; i < m_hosts.size(); ++i)
        if (m_hosts[i].name == host.name)
            row = i;
    if (row >= 0) {
        HostEntry updated = host;
        const HostEntry& old = m_hosts[row];
        // Saved again from the form (which has no GPU fields): what the last Test found stays
        // while the host is the same.
        if (updated.gpuCount == 0 && sameLogin(old, host)) {
            updated.gpuName = old.gpuName;
            updated.gpuMemoryMiB = old.gpuMemoryMiB;
            updated.gpuCount = old.gpuCount;
        }
        m_hosts[row] = updated;
    } else {
        m_hosts.append(host);
        row = int(m_hosts.size()) - 1;
    }
    refreshTable();
    selectHost(row);
    Q_EMIT hostsChanged();
}

void HostsPage::selectHost(int row)
{
    m_table->setCurrentCell(row, 0);
    fillForm(row);
}

void HostsPage::refreshTable()
{
    m_table->setRowCount(int(m_hosts.size()));
    for (int r = 0; r < m_hosts.size(); ++r) {
        const HostEntry& h = m_hosts[r];
        const QString address = h.address.isEmpty()
            ? tr("(this machine)")
            : (h.port != 22 ? QString("%1:%2").arg(h.address).arg(h.port) : h.address);
        const QString gpus
            = h.gpuCount > 0 ? tr("%1 × %2").arg(h.gpuCount).arg(h.gpuName) : QString();
        const QStringList cells = {h.name, h.kind == "slurm" ? tr("Slurm") : tr("SSH"), address,
            h.user, h.partition, gpus};
        for (int c = 0; c < cells.size(); ++c)
            m_table->setItem(r, c, new QTableWidgetItem(cells[c]));
    }
    m_table->resizeColumnsToContents();
    m_table->horizontalHeader()->setStretchLastSection(true);
}

void HostsPage::fillForm(int row)
{
    if (row < 0 || row >= m_hosts.size())
        return;
    const HostEntry& h = m_hosts[row];
    m_name->setText(h.name);
    m_kind->setCurrentIndex(m_kind->findData(h.kind));
    m_address->setText(h.address);
    m_port->setValue(h.port);
    m_user->setText(h.user);
    m_partition->setText(h.partition);
    m_timeLimit->setText(h.timeLimit);
    m_preemptSignal->setValue(h.preemptSignalSec);
}

HostEntry HostsPage::formEntry() const
{
    HostEntry e;
    e.name = m_name->text().trimmed();
    e.kind = m_kind->currentData().toString();
    e.address = m_address->text().trimmed();
    e.port = m_port->value();
    e.user = m_user->text().trimmed();
    e.partition = m_partition->text().trimmed();
    e.timeLimit = m_timeLimit->text().trimmed();
    e.preemptSignalSec = m_preemptSignal->value();
    return e;
}

jobs::SshHost HostsPage::sshHost(const HostEntry& host)
{
    jobs::SshHost h;
    h.user = host.user;
    h.host = host.address;
    h.port = host.port != 22 ? host.port : 0;
    return h;
}

namespace {

jobs::SshClient testClient()
{
    jobs::SshOptions o = jobs::SshOptions::fromEnvironment();
    o.connectTimeoutSec = kConnectTimeoutSec;
    return jobs::SshClient(o);
}

const QString kSinfo = QStringLiteral("sinfo -h -o %P");

} // namespace

QStringList HostsPage::testCommand(const HostEntry& host)
{
    // What a launch needs: the host answers, and shard-worker (or sinfo) is there.
    if (host.kind == "slurm" && host.address.isEmpty())
        return {"sinfo", "-h", "-o", "%P"};
    const QString remote = host.kind == "slurm"
        ? kSinfo
        : QStringLiteral("w=shard-worker; command -v \"$w\" >/dev/null 2>&1 || exit 127; \"$w\" "
                         "--version");
    return QStringList {QStringLiteral("ssh")} + testClient().sshArgs(sshHost(host)) << remote;
}

QString HostsPage::explainFailure(const HostEntry& host, int exitCode, const QString& err)
{
    const QString where = host.address.isEmpty()
        ? tr("this machine")
        : (host.port != 22 ? QString("%1:%2").arg(host.address).arg(host.port) : host.address);
    if (host.kind == "slurm" && (exitCode == 127 || err.contains("not found")))
        return tr("Slurm is not available on %1 (sinfo not found).").arg(where);
    if (host.kind == "slurm" && exitCode != 255 && !err.isEmpty())
        return tr("Slurm on %1 did not answer: %2").arg(where, err.trimmed().section('\n', 0, 0));
    if (host.kind == "ssh" && err.contains("shard-worker: not found"))
        return tr("%1 answers, but shard-worker is not installed there (not on the PATH of a "
                  "non-interactive shell). Install Shard Studio's worker on the host.")
            .arg(where);
    return jobs::SshClient::describeFailure(sshHost(host), exitCode, err.toLocal8Bit());
}

jobs::Result<jobs::HostCheck> HostsPage::runTest(const HostEntry& host)
{
    if (host.kind == "ssh")
        return jobs::SshLauncher::checkHost(testClient(), sshHost(host));
    jobs::SshResult r;
    if (host.address.isEmpty()) {
        QProcess p;
        p.start(QStringLiteral("sinfo"), {"-h", "-o", "%P"});
        if (!p.waitForStarted(5000))
            return jobs::fail(tr("Could not run sinfo: is it installed? (testing a local Slurm "
                                 "needs Slurm's tools on this machine)"));
        if (!p.waitForFinished(kConnectTimeoutSec * 4000)) {
            p.kill();
            p.waitForFinished(2000);
            return jobs::fail(tr("Slurm on this machine did not answer within %1 s.")
                                  .arg(kConnectTimeoutSec * 4));
        }
        r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
        r.out = p.readAllStandardOutput();
        r.err = p.readAllStandardError();
    } else {
        auto ran = testClient().run(sshHost(host), kSinfo, {}, kConnectTimeoutSec * 4000);
        if (!ran)
            return jobs::fail(ran.error());
        r = ran.value();
    }
    if (r.exitCode != 0)
        return jobs::fail(explainFailure(host, r.exitCode, QString::fromLocal8Bit(r.err)));
    jobs::HostCheck check;
    check.answer = tr("Slurm answers; partitions: %1")
                       .arg(QString::fromLocal8Bit(r.out).simplified().replace(' ', ", "));
    return check;
}

void HostsPage::testSelected()
{
    if (m_watcher)
        return;
    HostEntry host = formEntry();
    const int row = m_table->currentRow();
    if (host.name.isEmpty() && row >= 0 && row < m_hosts.size())
        host = m_hosts[row];
    if (host.kind == "ssh" && host.address.isEmpty()) {
        m_message->showMessage(tr("Choose a host or enter an address to test."));
        Q_EMIT testFinished(false, messageText());
        return;
    }
    m_testing = host;
    m_watcher = new QFutureWatcher<jobs::Result<jobs::HostCheck>>(this);
    connect(m_watcher, &QFutureWatcherBase::finished, this, &HostsPage::onFinished);
    m_watcher->setFuture(QtConcurrent::run([host] { return runTest(host); }));
    m_message->showMessage(tr("Testing %1…").arg(host.name.isEmpty() ? host.address : host.name),
        MessageBar::Kind::Info);
    m_busy->setVisible(true);
    m_cancel->setEnabled(true);
    m_test->setEnabled(false);
}

void HostsPage::cancelTest()
{
    if (!m_watcher)
        return;
    // The check ends on its own within its timeouts; its answer is no longer wanted.
    QFutureWatcher<jobs::Result<jobs::HostCheck>>* w = m_watcher;
    m_watcher = nullptr;
    w->disconnect(this);
    connect(w, &QFutureWatcherBase::finished, w, &QObject::deleteLater);
    if (w->isFinished())
        w->deleteLater();
    m_busy->setVisible(m_doctorWatcher != nullptr);
    m_cancel->setEnabled(false);
    m_test->setEnabled(true);
    m_message->showMessage(tr("Test cancelled."), MessageBar::Kind::Info);
    Q_EMIT testFinished(false, messageText());
}

void HostsPage::onFinished()
{
    if (!m_watcher)
        return;
    const jobs::Result<jobs::HostCheck> r = m_watcher->result();
    m_watcher->deleteLater();
    m_watcher = nullptr;
    m_busy->setVisible(m_doctorWatcher != nullptr);
    m_cancel->setEnabled(false);
    m_test->setEnabled(true);
    const QString name = m_testing.name.isEmpty() ? m_testing.address : m_testing.name;
    if (r) {
        const QString what = m_testing.kind == "slurm"
            ? r->answer
            : tr("connected, shard-worker found (%1)").arg(r->summary());
        m_message->showMessage(tr("%1: %2").arg(name, what), MessageBar::Kind::Info);
        // A saved SSH host remembers its GPUs, for the table and "Plan for these GPUs".
        bool found = false;
        for (HostEntry& h : m_hosts) {
            if (m_testing.kind != "ssh" || !sameLogin(h, m_testing))
                continue;
            h.gpuCount = int(r->gpus.size());
            h.gpuName = r->gpus.isEmpty() ? QString() : r->gpus.front().name;
            h.gpuMemoryMiB = r->gpus.isEmpty() ? 0.0 : r->gpus.front().memoryMiB;
            found = true;
        }
        if (found) {
            const int row = m_table->currentRow();
            refreshTable();
            m_table->setCurrentCell(row, 0);
            saveSettings();
        }
    } else {
        m_message->showMessage(r.error());
    }
    updatePlanButton();
    Q_EMIT testFinished(r.ok(), messageText());
}

void HostsPage::updatePlanButton()
{
    const int row = m_table->currentRow();
    m_plan->setEnabled(row >= 0 && row < m_hosts.size() && m_hosts[row].gpuCount > 0);
}

void HostsPage::planForSelected()
{
    const int row = m_table->currentRow();
    if (row < 0 || row >= m_hosts.size() || m_hosts[row].gpuCount <= 0) {
        m_message->showMessage(tr("Test a host first: its GPUs are what the test finds there."));
        return;
    }
    const HostEntry& h = m_hosts[row];
    Q_EMIT planRequested(h.gpuName, h.gpuMemoryMiB, h.gpuCount);
}

jobs::Result<QList<jobs::DoctorCheck>> HostsPage::runDoctor(const HostEntry& host)
{
    // A local Slurm cluster is this machine; else the SSH login (a Slurm cluster's login node).
    if (host.address.isEmpty())
        return jobs::doctorLocal(jobs::LocalLauncher::findWorker());
    auto r = jobs::doctorRemote(testClient(), sshHost(host), QStringLiteral("shard-worker"));
    if (!r)
        return jobs::fail(tr("Doctor could not reach %1: %2")
                              .arg(host.name.isEmpty() ? host.address : host.name, r.error()));
    return r;
}

void HostsPage::doctorSelected()
{
    HostEntry host = formEntry();
    const int row = m_table->currentRow();
    if (host.address.isEmpty() && host.kind == "ssh" && row >= 0 && row < m_hosts.size())
        host = m_hosts[row];
    if (host.kind == "ssh" && host.address.isEmpty()) {
        m_message->showMessage(tr("Choose a host or enter an address for the Doctor (or "
                                  "Doctor: this machine)."));
        Q_EMIT doctorFinished(false, {});
        return;
    }
    startDoctor(host.address.isEmpty() ? tr("this machine")
                                       : (host.name.isEmpty() ? host.address : host.name),
        host);
}

void HostsPage::doctorThisMachine()
{
    HostEntry local;
    local.kind = "slurm"; // an empty address: this machine
    startDoctor(tr("this machine"), local);
}

void HostsPage::startDoctor(const QString& subject, const HostEntry& host)
{
    if (m_doctorWatcher)
        return;
    m_doctorSubject = subject;
    m_doctorWatcher = new QFutureWatcher<jobs::Result<QList<jobs::DoctorCheck>>>(this);
    connect(m_doctorWatcher, &QFutureWatcherBase::finished, this, &HostsPage::onDoctorFinished);
    m_doctorWatcher->setFuture(QtConcurrent::run([host] { return runDoctor(host); }));
    m_doctorView->setHtml(tr("<p>Checking %1…</p>").arg(subject.toHtmlEscaped()));
    m_doctor->setEnabled(false);
    m_doctorLocal->setEnabled(false);
    m_busy->setVisible(true);
}

void HostsPage::onDoctorFinished()
{
    const jobs::Result<QList<jobs::DoctorCheck>> r = m_doctorWatcher->result();
    m_doctorWatcher->deleteLater();
    m_doctorWatcher = nullptr;
    m_doctor->setEnabled(true);
    m_doctorLocal->setEnabled(true);
    m_busy->setVisible(m_watcher != nullptr);
    if (!r) {
        m_doctorChecks.clear();
        m_doctorView->setHtml(QStringLiteral("<p>%1</p>").arg(r.error().toHtmlEscaped()));
        m_message->showMessage(r.error());
        Q_EMIT doctorFinished(false, m_doctorSubject);
        return;
    }
    m_doctorChecks = r.value();
    m_doctorView->setHtml(doctorHtml(m_doctorSubject, m_doctorChecks));
    int missing = 0;
    for (const jobs::DoctorCheck& c : m_doctorChecks)
        missing += c.status == "missing";
    if (missing > 0)
        m_message->showMessage(missing == 1
                ? tr("Doctor: one thing %1 needs is missing; the report says how to fix it.")
                      .arg(m_doctorSubject)
                : tr("Doctor: %1 things %2 needs are missing; the report says how to fix them.")
                      .arg(missing)
                      .arg(m_doctorSubject));
    else
        m_message->showMessage(
            tr("Doctor: %1 has what it needs.").arg(m_doctorSubject), MessageBar::Kind::Info);
    Q_EMIT doctorFinished(true, m_doctorSubject);
}

QString HostsPage::doctorHtml(const QString& subject, const QList<jobs::DoctorCheck>& checks)
{
    // A paragraph a check (wraps over the panel's width); the fix on its own line.
    QString html
        = tr("<p><b>What %1 can train with</b> (shard doctor)</p>").arg(subject.toHtmlEscaped());
    for (const jobs::DoctorCheck& c : checks) {
        // Marks in words as well as colour (readable without colour, and by screen readers).
        const QString mark = c.status == "ok" ? tr("<span style='color:#2e7d32'>✔ ok</span>")
            : c.status == "warn"              ? tr("<span style='color:#b26a00'>● note</span>")
                                              : tr("<span style='color:#c62828'><b>✘ "
                                                                "missing</b></span>");
        html += QStringLiteral("<p style='margin-top:2px; margin-bottom:4px'>%1 <b>%2</b>: %3")
                    .arg(mark, c.name.toHtmlEscaped(), c.detail.toHtmlEscaped());
        if (!c.fix.isEmpty())
            html += tr("<br>&nbsp;&nbsp;&nbsp;<i>Fix:</i> <code>%1</code>")
                        .arg(c.fix.toHtmlEscaped());
        html += QStringLiteral("</p>");
    }
    return html;
}

void HostsPage::saveSettings() const
{
    QSettings s;
    s.beginWriteArray("hosts", int(m_hosts.size()));
    for (int i = 0; i < m_hosts.size(); ++i) {
        s.setArrayIndex(i);
        s.setValue("name", m_hosts[i].name);
        s.setValue("kind", m_hosts[i].kind);
        s.setValue("address", m_hosts[i].address);
        s.setValue("port", m_hosts[i].port);
        s.setValue("user", m_hosts[i].user);
        s.setValue("partition", m_hosts[i].partition);
        s.setValue("timeLimit", m_hosts[i].timeLimit);
        s.setValue("preemptSignalSec", m_hosts[i].preemptSignalSec);
        s.setValue("gpuName", m_hosts[i].gpuName);
        s.setValue("gpuMemoryMiB", m_hosts[i].gpuMemoryMiB);
        s.setValue("gpuCount", m_hosts[i].gpuCount);
    }
    s.endArray();
}

void HostsPage::loadSettings()
{
    QSettings s;
    QList<HostEntry> hosts;
    const int n = s.beginReadArray("hosts");
    for (int i = 0; i < n; ++i) {
        s.setArrayIndex(i);
        HostEntry e;
        e.name = s.value("name").toString();
        e.kind = s.value("kind", "ssh").toString();
        e.address = s.value("address").toString();
        e.port = s.value("port", 22).toInt();
        e.user = s.value("user").toString();
        e.partition = s.value("partition").toString();
        e.timeLimit = s.value("timeLimit").toString();
        e.preemptSignalSec = s.value("preemptSignalSec", jobs::kDefaultPreemptSignalSec).toInt();
        e.gpuName = s.value("gpuName").toString();
        e.gpuMemoryMiB = s.value("gpuMemoryMiB", 0.0).toDouble();
        e.gpuCount = s.value("gpuCount", 0).toInt();
        if (!e.name.isEmpty())
            hosts.append(e);
    }
    s.endArray();
    setHosts(hosts);
    Q_EMIT hostsChanged();
}

} // namespace shard::widgets
