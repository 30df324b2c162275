// The doctor's facts and their judgement: plan/doctor.h's, in Qt's types for the studio and the
// CLI (see doctor.h).
#include "jobs/doctor.h"

#include <QJsonObject>
#include <QObject>

#include "jobs/ssh_client.h"
#include "plan/doctor.h"

namespace shard::jobs {

namespace {

std::string str(const QString& s)
{
    return s.toStdString();
}
QString qstr(const std::string& s)
{
    return QString::fromStdString(s);
}

doctor::Facts toStd(const DoctorFacts& f)
{
    doctor::Facts d;
    d.os = str(f.os);
    d.cores = f.cores;
    d.ramGiB = f.ramGiB;
    d.workerProgram = str(f.workerProgram);
    d.workerPath = str(f.workerPath);
    d.workerExit = f.workerExit;
    d.workerVersion = str(f.workerVersion);
    d.driverProc = str(f.driverProc);
    d.smiFound = f.smiFound;
    d.smiExit = f.smiExit;
    d.smiOutput = str(f.smiOutput);
    d.linkerLibs = str(f.linkerLibs);
    d.cudnnPackage = str(f.cudnnPackage);
    d.ssh = str(f.ssh);
    d.slurm = str(f.slurm);
    d.complete = f.complete;
    return d;
}

DoctorFacts fromStd(const doctor::Facts& d)
{
    DoctorFacts f;
    f.os = qstr(d.os);
    f.cores = d.cores;
    f.ramGiB = d.ramGiB;
    f.workerProgram = qstr(d.workerProgram);
    f.workerPath = qstr(d.workerPath);
    f.workerExit = d.workerExit;
    f.workerVersion = qstr(d.workerVersion);
    f.driverProc = qstr(d.driverProc);
    f.smiFound = d.smiFound;
    f.smiExit = d.smiExit;
    f.smiOutput = qstr(d.smiOutput);
    f.linkerLibs = qstr(d.linkerLibs);
    f.cudnnPackage = qstr(d.cudnnPackage);
    f.ssh = qstr(d.ssh);
    f.slurm = qstr(d.slurm);
    f.complete = d.complete;
    return f;
}

std::vector<doctor::Check> toStd(const QList<DoctorCheck>& checks)
{
    std::vector<doctor::Check> out;
    for (const DoctorCheck& c : checks)
        out.push_back({str(c.name), str(c.status), str(c.detail), str(c.fix)});
    return out;
}

QList<DoctorCheck> fromStd(const std::vector<doctor::Check>& checks)
{
    QList<DoctorCheck> out;
    for (const doctor::Check& c : checks)
        out.append({qstr(c.name), qstr(c.status), qstr(c.detail), qstr(c.fix)});
    return out;
}

} // namespace

QString doctorScript(const QString& workerProgram)
{
    return qstr(doctor::script(str(workerProgram)));
}

DoctorFacts parseDoctorFacts(const QByteArray& output, const QString& workerProgram)
{
    return fromStd(doctor::parseFacts(output.toStdString(), str(workerProgram)));
}

QList<DoctorCheck> diagnose(const DoctorFacts& f)
{
    return fromStd(doctor::diagnose(toStd(f)));
}

bool workerMissing(const QList<DoctorCheck>& checks)
{
    return doctor::workerMissing(toStd(checks));
}

Result<QList<DoctorCheck>> doctorLocal(const QString& workerProgram)
{
    try {
        return fromStd(doctor::runLocal(str(workerProgram)));
    } catch (const std::exception& e) {
        return fail(QString::fromStdString(e.what()));
    }
}

Result<QList<DoctorCheck>> doctorRemote(
    const SshClient& ssh, const SshHost& host, const QString& workerProgram)
{
    auto r = ssh.run(host, doctorScript(workerProgram), {}, 60000);
    if (!r)
        return fail(r.error());
    return diagnose(parseDoctorFacts(r->out, workerProgram));
}

QJsonArray toJson(const QList<DoctorCheck>& checks)
{
    QJsonArray out;
    for (const DoctorCheck& c : checks)
        out.append(QJsonObject {
            {"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"fix", c.fix}});
    return out;
}

QString formatDoctor(const QList<DoctorCheck>& checks)
{
    return qstr(doctor::format(toStd(checks)));
}

} // namespace shard::jobs
