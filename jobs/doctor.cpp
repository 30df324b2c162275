// The doctor's facts and their judgement: plan/doctor.h's, in Qt's types for the studio and the
// CLI (see doctor.h).
#include "jobs/doctor.h"

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
    return doctor::parseFacts(output.toStdString(), str(workerProgram));
}

QList<DoctorCheck> diagnoseFacts(const DoctorFacts& f)
{
    return fromStd(doctor::diagnose(f));
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
    return diagnoseFacts(parseDoctorFacts(r->out, workerProgram));
}

std::string doctorJson(const QList<DoctorCheck>& checks)
{
    return doctor::toJson(toStd(checks));
}

QString formatDoctor(const QList<DoctorCheck>& checks)
{
    return qstr(doctor::format(toStd(checks)));
}

} // namespace shard::jobs
