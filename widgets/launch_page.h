// Launch page: data files and format, model, output, learning rate and schedule, steps or
// epochs, checkpoint interval, seed, batch shape and sharding; the exact command and run.json
// that will start; launch presets saved and loaded by name; start (local target) through the
// jobs library's launcher on the store thread.
#pragma once

#include <optional>

#include <QFutureWatcher>
#include <QWidget>

#include "jobs/command_run.h"
#include "jobs/launch_request.h"
#include "jobs/preflight.h"
#include "jobs/result.h"
#include "jobs/run_service.h"
#include "plan/planner.h"
#include "protocol/run_spec.h"
#include "widgets/hosts_page.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTimer;

namespace shard::widgets {

class LoraFields;
class ParallelFields;
class MessageBar;

// What stops a start and what only warns: the preflight's findings (jobs/preflight.h).
using InputProblems = jobs::Preflight;

// "run-20261201-215959": a name no earlier run of this studio has.
QString defaultRunName();

class LaunchPage : public QWidget {
    Q_OBJECT
public:
    explicit LaunchPage(QWidget* parent = nullptr);

    void setStore(jobs::RunService* store);
    // Targets offered besides this machine: the Hosts page's SSH hosts and Slurm clusters.
    void setHosts(const QList<HostEntry>& hosts);
    void setTarget(int index);
    jobs::LaunchTarget target() const;
    // SSH: the model and data are copied to the host (else they must be there already).
    bool copiesInputs() const;
    // Takes every field a plan decides (plan::applyPlanToSpec): model, device, GPUs per node,
    // nodes, strategy, shard group, precision, checkpointing, offload and batch shape. A preset
    // model has no weights to train: the model field is cleared and the message says so.
    void applyPlan(const plan::PlanInput& input, const QString& modelSource);

    // The run spec the fields describe, validated; or what is wrong.
    jobs::Result<protocol::RunSpec> spec() const;
    // The fields as a spec, unchecked (what applyPlan edits).
    protocol::RunSpec fieldsSpec() const;
    // Why a valid spec cannot run with this engine (a device it does not train on); empty when
    // it can. Start stays disabled while it is not empty.
    QString cannotRunHere() const;
    // The preflight of the fields (jobs/preflight.h), worded for this page: the model folder,
    // tokenizer, data (read through), run folder, batch against the data and the planner's fit
    // (files only where they are read on this machine). Reads files: the page itself runs it off
    // the UI thread as the fields change; this synchronous form is for callers and tests.
    InputProblems checkInputs() const;
    // The fields' preflight is running (Start waits for it).
    bool checking() const { return !m_checked; }
    // What start() will hand the launcher (run directory and port fixed by the preview).
    jobs::Result<jobs::LaunchRequest> request() const;
    QString commandPreview() const;
    // Preference objectives: the first data pairs as the model sees them (chat template applied,
    // cut to the sequence length); empty otherwise.
    QString pairPreview() const;
    void start();

    // "Run a command instead of the engine" (jobs/command_run.h): torchrun, deepspeed, accelerate
    // or any script, on this machine, an SSH host or through Slurm, recorded and followed like a
    // run. While it is checked the engine's fields (but Target and Nodes) are set aside and Start
    // starts the command.
    bool commandMode() const;
    void setCommandMode(bool on);
    void setCommand(const QString& command, const QString& workdir = {}, const QString& logdir = {},
        const QString& env = {});
    // What Start hands the run service in command mode, or what is missing.
    jobs::Result<jobs::CommandRunRequest> commandRequest() const;
    // Slurm: the batch script as the user edited it ("Edit the batch script…"); empty: the
    // written one. Kept until reset, also across field changes (the preview then says when it
    // no longer names the run folder).
    QString editedSbatch() const { return m_editedSbatch; }
    void setEditedSbatch(const QString& script);
    // Opens the batch script in an editor dialog (OK keeps the edit, Reset the written one).
    void editSbatch();

    // Fills the form from a run's run.json ("launch again like this run").
    bool loadRunSpec(const nlohmann::json& runJson);
    void savePreset(const QString& name);
    bool loadPreset(const QString& name);
    QStringList presetNames() const;
    void saveSettings() const;
    void loadSettings();
    QString messageText() const;

    // Field setters for callers and tests.
    void setModelFolder(const QString& folder);
    void setDataFiles(const QStringList& files);
    void setRunsRoot(const QString& folder);
    void setRunName(const QString& name);
    void setSteps(int steps);
    void setWorkerProgram(const QString& program) { m_workerProgram = program; }

Q_SIGNALS:
    void launched(qint64 runId, const QString& runDirectory);
    void previewChanged();

private:
    void updatePreview();
    void updatePairPreview(const protocol::RunSpec& spec);
    jobs::PreflightInput preflightInput(const protocol::RunSpec& spec) const;
    // Starts the preflight of `spec` off the UI thread (the latest fields win).
    void runChecks(const protocol::RunSpec& spec);
    void showChecks(const InputProblems& problems);
    void updateStartEnabled();
    // keepBase: the hidden settings stay those of the last preset or run loaded.
    void toFields(const protocol::RunSpec& s, bool keepBase = false);
    QString runDirectory() const;

    jobs::RunService* m_store = nullptr;
    protocol::RunSpec m_base; // what the fields do not show, from the last preset or run loaded
    int m_masterPort = 0;
    QString m_workerProgram = QStringLiteral("shard-worker");
    QList<HostEntry> m_hosts;
    bool m_starting = false; // a start request is on its way to the store thread
    bool m_ready = false;    // the fields make a request (its preview is not "Not ready")
    QFutureWatcher<InputProblems>* m_checks = nullptr;
    std::optional<jobs::PreflightInput> m_nextCheck; // fields changed while a check ran
    bool m_checked = false;                          // m_lastCheck is of the current fields
    bool m_startWhenChecked = false;                 // Start was asked for during a check
    InputProblems m_lastCheck;
    QTimer* m_debounce = nullptr;

    QLineEdit* m_name = nullptr;
    QLineEdit* m_model = nullptr;
    QLineEdit* m_data = nullptr;
    QComboBox* m_format = nullptr;
    QLineEdit* m_out = nullptr;
    QLineEdit* m_lr = nullptr;
    QComboBox* m_schedule = nullptr;
    QSpinBox* m_warmup = nullptr;
    QSpinBox* m_steps = nullptr;
    QSpinBox* m_epochs = nullptr;
    QSpinBox* m_ckptEvery = nullptr;
    QSpinBox* m_seed = nullptr;
    QSpinBox* m_microBatch = nullptr;
    QSpinBox* m_seqLen = nullptr;
    QSpinBox* m_gradAccum = nullptr;
    QComboBox* m_strategy = nullptr;
    QSpinBox* m_shardGroup = nullptr;
    ParallelFields* m_parallel = nullptr; // tensor / pipeline / sequence parallel
    QSpinBox* m_ranks = nullptr;
    QSpinBox* m_nodes = nullptr;
    QComboBox* m_device = nullptr;
    QComboBox* m_offload = nullptr;
    QComboBox* m_reduceDtype = nullptr; // bf16-mixed: fp32 or bf16 gradient reduce
    QLineEdit* m_evalData = nullptr;
    QSpinBox* m_evalEvery = nullptr;
    QLineEdit* m_samplePrompts = nullptr; // a file of prompts, one per line (Monitor ▸ Samples)
    QSpinBox* m_sampleEvery = nullptr;
    QCheckBox* m_packing = nullptr;
    QCheckBox* m_skipBadLines = nullptr;
    QLineEdit* m_weightDecay = nullptr;
    QSpinBox* m_keepCheckpoints = nullptr;
    QSpinBox* m_maxRestarts = nullptr; // run spec max_restarts (launch --max-restarts)
    QComboBox* m_precision = nullptr;
    QComboBox* m_checkpointing = nullptr;
    LoraFields* m_lora = nullptr;
    QComboBox* m_target = nullptr;
    QComboBox* m_inputs = nullptr;
    QLabel* m_inputsLabel = nullptr;
    QComboBox* m_presets = nullptr;
    QPushButton* m_savePreset = nullptr;
    QPushButton* m_loadPreset = nullptr;
    QPushButton* m_start = nullptr;
    QGroupBox* m_commandBox = nullptr; // checkable: command mode
    QLineEdit* m_command = nullptr;
    QLineEdit* m_workdir = nullptr;
    QLineEdit* m_logdir = nullptr;
    QLineEdit* m_commandEnv = nullptr;         // KEY=VALUE KEY=VALUE
    QPushButton* m_editSbatchButton = nullptr; // command mode on a Slurm target
    QString m_editedSbatch;
    QList<QWidget*> m_engineBoxes; // set aside in command mode
    QPlainTextEdit* m_preview = nullptr;
    QPlainTextEdit* m_pairs = nullptr; // preference pairs' preview
    QLabel* m_pairsLabel = nullptr;
    QString m_pairsKey; // what the shown preview was made from
    MessageBar* m_message = nullptr;
    QLabel* m_nameProblem = nullptr;
    QLabel* m_modelProblem = nullptr;
    QLabel* m_dataProblem = nullptr;
    QLabel* m_fitProblem = nullptr;
    QLabel* m_scheduleNote = nullptr;
    QLabel* m_dataNote = nullptr;
    QLabel* m_checkingLabel = nullptr;
};

} // namespace shard::widgets
