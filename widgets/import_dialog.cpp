#include "widgets/import_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QRegularExpressionValidator>
#include <QVBoxLayout>

namespace shard::widgets {

namespace {

// As squeue prints a job: its number, or ARRAY_TASK (followSlurmJob checks the same).
const QRegularExpression kJobId(QStringLiteral("^[0-9]+(_[0-9]+)?$"));

} // namespace

ImportDialog::ImportDialog(const QList<HostEntry>& hosts, QWidget* parent)
    : QDialog(parent)
    , m_hosts(hosts)
{
    setWindowTitle(tr("Import logs"));
    setObjectName("importDialog");
    m_where = new QComboBox(this);
    m_where->setObjectName("importWhere");
    m_where->addItem(tr("This machine"));
    for (const HostEntry& h : hosts)
        m_where->addItem(
            h.kind == "slurm" ? tr("Slurm: %1").arg(h.name) : tr("SSH: %1").arg(h.name));
    m_where->setToolTip(tr("Where the logs are: this machine, or a host of the Hosts page (read "
                           "over ssh; a Slurm cluster through its login node)"));
    m_path = new QLineEdit(this);
    m_path->setObjectName("importPath");
    m_path->setPlaceholderText(tr("A log folder, a run's folder or a file"));
    m_path->setToolTip(tr("TensorBoard event files (Hugging Face Trainer, torchtitan, DeepSpeed, "
                          "Megatron-LM, Lightning), a trainer_state.json, a job's stdout "
                          "(train.log, slurm-1234.out), or a run folder of Shard Studio. A "
                          "folder is searched for every run in it."));
    m_browse = new QPushButton(tr("&Browse…"), this);
    m_job = new QLineEdit(this);
    m_job->setObjectName("importSlurmJob");
    m_job->setPlaceholderText(tr("optional, e.g. 123456"));
    m_job->setValidator(new QRegularExpressionValidator(kJobId, m_job));
    m_job->setToolTip(tr("The Slurm job that writes the run: the run takes the job's state "
                         "(pending, running, finished, failed) and is followed until the job "
                         "ends. Slurm is asked where the logs are."));
    m_preview = new QLabel(this);
    m_preview->setObjectName("importPreview");
    m_preview->setWordWrap(true);
    m_preview->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    m_buttons->addButton(tr("&Import"), QDialogButtonBox::AcceptRole);

    auto* pathRow = new QHBoxLayout;
    pathRow->addWidget(m_path, 1);
    pathRow->addWidget(m_browse);
    auto* form = new QFormLayout;
    form->addRow(tr("&Where"), m_where);
    auto* pathLabel = new QLabel(tr("&Path"), this);
    pathLabel->setBuddy(m_path);
    form->addRow(pathLabel, pathRow);
    form->addRow(tr("Slurm &job"), m_job);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_preview);
    layout->addWidget(m_buttons);

    connect(m_where, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { update(); });
    connect(m_path, &QLineEdit::textChanged, this, [this] { update(); });
    connect(m_job, &QLineEdit::textChanged, this, [this] { update(); });
    connect(m_browse, &QPushButton::clicked, this, [this] {
        const QString dir
            = QFileDialog::getExistingDirectory(this, tr("A log folder or a run folder"));
        if (!dir.isEmpty())
            m_path->setText(dir);
    });
    connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    update();
}

void ImportDialog::setWhere(int index)
{
    m_where->setCurrentIndex(index);
}

void ImportDialog::setPath(const QString& path)
{
    m_path->setText(path);
}

void ImportDialog::setSlurmJob(const QString& jobId)
{
    m_job->setText(jobId);
}

const HostEntry* ImportDialog::host() const
{
    const int i = m_where->currentIndex() - 1;
    return i >= 0 && i < m_hosts.size() ? &m_hosts[i] : nullptr;
}

QString ImportDialog::importPath() const
{
    const QString path = m_path->text().trimmed();
    const HostEntry* h = host();
    if (!h || h->sshAddress().isEmpty()) // this machine, or a Slurm cluster on it
        return path;
    return h->sshAddress() + ":" + path;
}

QString ImportDialog::slurmJob() const
{
    return m_job->text().trimmed();
}

QString ImportDialog::problem() const
{
    const QString path = m_path->text().trimmed();
    if (path.isEmpty())
        return tr("Give the folder or file to import.");
    const HostEntry* h = host();
    if (h && !h->sshAddress().isEmpty() && !path.startsWith('/') && !path.startsWith("~/"))
        return tr("On %1, give the path from / or from ~/ (the folder there, not on this "
                  "machine).")
            .arg(h->name);
    if (!slurmJob().isEmpty() && !kJobId.match(slurmJob()).hasMatch())
        return tr("'%1' is not a Slurm job id: its number, or ARRAY_TASK as squeue prints it.")
            .arg(slurmJob());
    return {};
}

void ImportDialog::update()
{
    const HostEntry* h = host();
    const bool here = !h || h->sshAddress().isEmpty();
    m_browse->setEnabled(here);
    m_browse->setToolTip(
        here ? QString() : tr("The folder is on %1: type its path there").arg(h->name));
    const QString why = problem();
    for (QAbstractButton* b : m_buttons->buttons())
        if (m_buttons->buttonRole(b) == QDialogButtonBox::AcceptRole)
            b->setEnabled(why.isEmpty());
    if (!why.isEmpty()) {
        m_preview->setText(why);
        return;
    }
    QString text = here
        ? tr("Imports %1 from this machine.").arg(importPath())
        : tr("Imports %1 over ssh, mirrored here and read again as it grows.").arg(importPath());
    if (!slurmJob().isEmpty())
        text += ' '
            + tr("The run takes the state of Slurm job %1 and is followed until the job ends.")
                  .arg(slurmJob());
    m_preview->setText(text);
}

} // namespace shard::widgets
