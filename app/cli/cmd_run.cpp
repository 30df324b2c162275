// `shard run`: start a run locally, over SSH on one or more hosts, or through Slurm; record it
// in the run store and follow it with a progress bar (or --detach).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <QCoreApplication>

#include "command.h"
#include "jobs/command_run.h"
#include "jobs/preflight.h"
#include "jobs/slurm_options.h"
#include "protocol/run_spec.h"
#include "protocol/train_flags.h"
#include "run_follow.h"
#include "terminal_text.h"

namespace shard::cli {
namespace {

struct RunOptions {
    std::string store;
    std::string name;
    std::string runDir;
    std::string worker = "shard-worker";
    std::string sshConfig;
    std::vector<std::string> hosts;
    std::vector<std::string> env;
    int nproc = 0; // 0: not given
    int masterPort = 0;
    bool detach = false;
    bool slurm = false;
    std::string via;
    int nodes = 1;
    int gpusPerNode = 0;
    int cpusPerTask = 0;
    int preemptSignalSec = jobs::kDefaultPreemptSignalSec;
    std::string time, partition, account;
    std::vector<std::string> args;
    // A command instead of the engine (jobs/command_run.h).
    std::string command;
    std::string workdir;
    std::string logdir;
    bool resume = false;
    double graceSec = 10;
    std::string supervisor;
    std::string sbatchScript;
    bool noPreflight = false;
};

protocol::RunSpec readSpec(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("cannot read run spec " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded())
        throw std::runtime_error("run spec " + path + ": not valid JSON");
    try {
        protocol::RunSpec spec = protocol::runSpecFromJson(j);
        protocol::validate(spec);
        return spec;
    } catch (const std::exception& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
}

// What the engine would refuse once started, said before anything starts (jobs/preflight.h):
// the model and data where they are read on this machine (a local run, or a Slurm job submitted
// from here), the run folder and the memory of a local run. Warnings are printed and the start
// goes on; a blocking problem ends `shard run` with every one of them listed.
void preflightCheck(const jobs::LaunchRequest& req, const RunOptions& o)
{
    const bool local = !o.slurm && o.hosts.empty();
    jobs::PreflightInput in;
    in.spec = req.spec;
    in.spec.outDir = req.runDir.toStdString();
    in.runName = req.name;
    in.checkFiles = local || (o.slurm && o.via.empty());
    in.checkRunFolder = local && !req.runDir.isEmpty() && !req.resume;
    in.checkFit = local;
    in.wording = jobs::Wording::Cli;
    const jobs::Preflight p = jobs::preflight(in);
    // DPO / ORPO: the first pairs as the model will see them (as TRL and LLaMA-Factory print a
    // processed example at the start), before a problem is said.
    if (!p.pairPreview.isEmpty()) {
        std::fprintf(stderr, "the first pairs, as the model sees them:\n");
        for (const QString& line : p.pairPreview.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
            std::fprintf(stderr, "  %s\n", qPrintable(line));
    }
    for (const QString& note : {p.dataNote, p.schedule})
        if (!note.isEmpty())
            std::fprintf(stderr, "note: %s\n", qPrintable(note));
    if (!p.blocking())
        return;
    std::string why = "not started:";
    for (const QString& problem : p.all())
        why += "\n  " + problem.toStdString();
    throw std::runtime_error(why + "\n(--no-preflight starts it anyway)");
}

// After a start: return at once (--detach), or follow the run to its end and say how it ended.
int followStarted(jobs::RunStore& store, qint64 id, bool detach)
{
    if (detach) {
        std::printf("detached: `shard attach %lld` to follow, `shard stop %lld` to stop\n",
            static_cast<long long>(id), static_cast<long long>(id));
        return 0;
    }
    std::printf("(Ctrl-C detaches; the run goes on)\n");
    const jobs::RunRecord final = followRun(store, id);
    if (jobs::isTerminal(final.status))
        printSummary(final);
    return exitCodeFor(final.status);
}

// The Slurm options of `shard run --slurm` (engine and command runs alike).
jobs::SlurmOptions slurmOptions(const RunOptions& o)
{
    if (!o.hosts.empty())
        throw std::runtime_error("--host and --slurm do not mix; use --slurm --via HOST to "
                                 "submit through a login node");
    jobs::SlurmOptions so;
    so.nodes = o.nodes;
    so.gpusPerNode = o.gpusPerNode;
    so.cpusPerTask = o.cpusPerTask;
    so.preemptSignalSec = o.preemptSignalSec;
    so.time = QString::fromStdString(o.time);
    so.partition = QString::fromStdString(o.partition);
    so.account = QString::fromStdString(o.account);
    so.via = QString::fromStdString(o.via);
    if (const char* conf = std::getenv("SLURM_CONF"); conf && !so.via.isEmpty())
        so.clientEnv << QStringLiteral("SLURM_CONF=%1").arg(conf);
    return so;
}

// `shard run --command '...'`: the command as a run, here, on an SSH host or through Slurm.
int runUserCommand(const RunOptions& o)
{
    if (!o.args.empty())
        throw std::runtime_error("--command runs the command given to it: drop the run spec or "
                                 "train flags ("
            + o.args.front() + ")");
    if (o.resume && o.runDir.empty())
        throw std::runtime_error("--resume runs the command again in its run folder: name it "
                                 "with --run-dir DIR");
    if (!o.sshConfig.empty())
        qputenv("SHARD_SSH_CONFIG", QByteArray::fromStdString(o.sshConfig));
    jobs::CommandRunRequest req;
    req.name = QString::fromStdString(o.name);
    req.spec.command = QString::fromStdString(o.command);
    req.spec.workdir = QString::fromStdString(o.workdir);
    req.spec.logdir = QString::fromStdString(o.logdir);
    for (const auto& e : o.env)
        req.spec.env << QString::fromStdString(e);
    req.spec.graceMs = static_cast<int>(o.graceSec * 1000);
    req.runDir = QString::fromStdString(o.runDir);
    req.resume = o.resume;
    req.masterPort = o.masterPort;
    req.supervisor = QString::fromStdString(o.supervisor);
    if (!o.sbatchScript.empty()) {
        if (!o.slurm)
            throw std::runtime_error("--sbatch-script is the batch script of a --slurm job; add "
                                     "--slurm");
        std::ifstream in(o.sbatchScript);
        if (!in)
            throw std::runtime_error("cannot read the batch script " + o.sbatchScript);
        std::stringstream ss;
        ss << in.rdbuf();
        req.sbatchScript = QString::fromStdString(ss.str());
    }
    if (o.slurm) {
        req.target = jobs::LaunchTarget::onSlurm(slurmOptions(o));
    } else if (!o.hosts.empty()) {
        QStringList hosts;
        for (const auto& h : o.hosts)
            hosts << QString::fromStdString(h);
        req.target = jobs::LaunchTarget::ssh(hosts);
    }
    // On this machine (also a Slurm job submitted from it) the supervisor is this program.
    if (req.supervisor.isEmpty()
        && (req.target.kind == jobs::TargetKind::Local
            || (o.slurm && req.target.slurm.via.isEmpty())))
        req.supervisor = QCoreApplication::applicationFilePath();
    jobs::RunStore store = openStore(o.store);
    const jobs::Result<qint64> id = jobs::startCommandRun(store, req);
    if (!id)
        throw std::runtime_error(id.error().toStdString());
    auto run = store.run(*id);
    std::printf("run %lld '%s' started (command, %s%s%s): %s\n", static_cast<long long>(*id),
        terminalText(run->name).constData(), qPrintable(jobs::toString(run->target)),
        run->host.isEmpty() ? "" : " on ", qPrintable(run->host), qPrintable(run->runDir));
    if (!run->jobId.isEmpty())
        std::printf("Slurm job %s\n", qPrintable(run->jobId));
    return followStarted(store, *id, o.detach);
}

int runCommand(const RunOptions& o)
{
    if (!o.command.empty())
        return runUserCommand(o);
    if (o.resume)
        throw std::runtime_error("--resume applies to --command runs; an engine run resumes "
                                 "with `-- --resume auto` and --run-dir");
    if (!o.sshConfig.empty())
        qputenv("SHARD_SSH_CONFIG", QByteArray::fromStdString(o.sshConfig));
    jobs::LaunchRequest req;
    const bool specFile = o.args.size() == 1 && o.args[0].size() > 5
        && o.args[0].compare(o.args[0].size() - 5, 5, ".json") == 0;
    if (o.args.empty())
        throw std::runtime_error("give a run spec (run.json) or the worker's train flags after "
                                 "`--` (see `shard run --help`)");
    // Either way the launch carries a typed spec: a spec file as it is, train flags read by the
    // same table the worker's `train` reads them with.
    if (specFile)
        req.spec = readSpec(o.args[0]);
    else
        protocol::applyTrainFlags(req.spec, o.args);
    // The rank count, given as --nproc or as the worker's --nproc-per-node, starts that many
    // ranks either way; two different values are refused.
    if (!specFile) {
        if (const auto flag = protocol::flagValue(o.args, "--nproc-per-node")) {
            if (req.spec.procsPerNode < 1)
                throw std::runtime_error(
                    "--nproc-per-node '" + *flag + "' is not a positive number of ranks");
            if (o.nproc > 0 && o.nproc != req.spec.procsPerNode)
                throw std::runtime_error("--nproc " + std::to_string(o.nproc)
                    + " and the train flag --nproc-per-node " + *flag
                    + " disagree; give the rank count once");
        }
    }
    if (o.nproc > 0)
        req.spec.procsPerNode = o.nproc;
    // "resume": "auto" (or `--resume auto` after `--`) continues the run already in --run-dir
    // from its latest complete checkpoint, in the same store record.
    req.resume = !req.spec.resume.empty();
    std::string runDir = o.runDir;
    if (runDir.empty() && req.spec.resume == "auto") {
        runDir = req.spec.outDir;
        if (runDir.empty())
            throw std::runtime_error("resume \"auto\" continues the run in a folder: name it "
                                     "with --run-dir DIR (the interrupted run's folder)");
    }
    const std::string name = !o.name.empty() ? o.name : req.spec.name;
    req.name = QString::fromStdString(name.empty() ? "run" : name);
    req.runDir = QString::fromStdString(runDir);
    req.masterPort = o.masterPort;
    for (const auto& e : o.env)
        req.env << QString::fromStdString(e);
    req.workerProgram = QString::fromStdString(o.worker);

    jobs::RunStore store = openStore(o.store);
    jobs::LaunchTarget target;
    if (o.slurm) {
        jobs::SlurmOptions so = slurmOptions(o);
        if (so.via.isEmpty() && req.workerProgram == QLatin1String("shard-worker")) {
            const QString local = jobs::LocalLauncher::findWorker();
            if (!local.isEmpty())
                req.workerProgram = local;
        }
        target = jobs::LaunchTarget::onSlurm(so);
    } else if (!o.hosts.empty()) {
        QStringList hosts;
        for (const auto& h : o.hosts)
            hosts << QString::fromStdString(h);
        target = jobs::LaunchTarget::ssh(hosts);
    }
    if (!o.noPreflight)
        preflightCheck(req, o);
    auto launcher = jobs::makeLauncher(target, &store);
    if (!launcher)
        throw std::runtime_error(launcher.error().toStdString());
    const jobs::Result<qint64> id = launcher.value()->start(req);
    if (!id)
        throw std::runtime_error(id.error().toStdString());
    auto run = store.run(*id);
    std::printf("run %lld '%s' started (%s%s%s): %s\n", static_cast<long long>(*id),
        terminalText(run->name).constData(), qPrintable(jobs::toString(run->target)),
        run->host.isEmpty() ? "" : " on ", qPrintable(run->host), qPrintable(run->runDir));
    if (!run->jobId.isEmpty())
        std::printf("Slurm job %s\n", qPrintable(run->jobId));
    return followStarted(store, *id, o.detach);
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    auto* cmd = app.add_subcommand("run",
        "start a run (locally, over SSH, or through Slurm) and "
        "follow it: shard run [options] RUN.json | shard run "
        "[options] -- <shard-worker train flags>");
    cmd->add_option("--store", o->store, "run store (default $SHARD_STORE or the app data folder)");
    cmd->add_option("--name", o->name, "run name");
    cmd->add_option("--run-dir", o->runDir, "run directory (on the target)");
    cmd->add_option("--nproc", o->nproc,
           "ranks per node (default: the spec's procs_per_node, or the train flag "
           "--nproc-per-node)")
        ->check(cmdline::positiveNumber());
    cmd->add_option("--worker", o->worker, "shard-worker program (path or name on PATH)");
    cmd->add_option("--host", o->hosts, "SSH host [user@]host[:port]; repeat for more nodes")
        ->allow_extra_args(false);
    cmd->add_option("--ssh-config", o->sshConfig, "ssh config file (-F) instead of ~/.ssh/config");
    cmd->add_option("--master-port", o->masterPort, "rendezvous port (default: a free one)");
    cmd->add_option("--env", o->env, "KEY=VALUE for the launcher's environment (repeatable)")
        ->allow_extra_args(false);
    cmd->add_flag("--detach", o->detach, "return at once; the run goes on");
    cmd->add_flag("--no-preflight", o->noPreflight,
        "start without first checking the model, the data (every line), the run folder and the "
        "memory of a local run");
    cmd->add_flag("--slurm", o->slurm, "submit through Slurm (sbatch)");
    cmd->add_option("--via", o->via, "Slurm: submit on this login node over SSH");
    cmd->add_option("--nodes", o->nodes, "Slurm: nodes (default: the run spec's)")
        ->check(cmdline::positiveNumber());
    cmd->add_option("--gpus-per-node", o->gpusPerNode,
        "Slurm: GPUs per node (default: one per rank when the device is cuda)");
    cmd->add_option("--cpus-per-task", o->cpusPerTask, "Slurm: CPUs per node launcher");
    cmd->add_option("--preempt-signal", o->preemptSignalSec,
           "Slurm: seconds before the time limit at which the ranks get SIGUSR1, write a "
           "checkpoint and the job requeues itself to continue from it (default "
               + std::to_string(jobs::kDefaultPreemptSignalSec) + "; 0: none)")
        ->check(cmdline::nonNegativeNumber());
    cmd->add_option("--time", o->time, "Slurm: time limit (e.g. 02:00:00)");
    cmd->add_option("--partition", o->partition, "Slurm: partition");
    cmd->add_option("--account", o->account, "Slurm: account");
    cmd->add_option("--command", o->command,
        "run this command instead of the engine (e.g. 'torchrun --nproc_per_node 2 train.py'), "
        "here, on one --host, or through --slurm: recorded, followed from the metric lines it "
        "prints, stoppable");
    cmd->add_option("--workdir", o->workdir,
        "--command: the folder it runs in (default: the run "
        "folder)");
    cmd->add_option("--logdir", o->logdir,
        "--command: the TensorBoard log folder it writes (relative: inside --workdir); its "
        "event files are followed and give the run's points");
    cmd->add_flag("--resume", o->resume,
        "--command: run the command again in --run-dir, in the same store record");
    cmd->add_option("--supervisor", o->supervisor,
        "--command: the shard program on the SSH host or the Slurm login node, which runs and "
        "records the command there (default: shard on PATH there; this program here)");
    cmd->add_option("--sbatch-script", o->sbatchScript,
        "--command --slurm: submit this batch script instead of the one written from the "
        "options (start from the Launch page's preview); it must run `shard supervise-command "
        "RUNDIR` on the run folder");
    cmd->add_option("--grace", o->graceSec,
           "--command: seconds between TERM and KILL when stopped (default 10)")
        ->check(cmdline::positiveNumber());
    // `run.json`, or the worker's train flags after `--` (kept verbatim and in order).
    cmd->add_option("args", o->args, "RUN.json, or -- <shard-worker train flags>");
    cmd->callback([o] { exitCode() = runCommand(*o); });
});

} // namespace
} // namespace shard::cli
