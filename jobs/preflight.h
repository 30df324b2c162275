// One preflight for a run about to start: what the engine would refuse once started (no model
// folder, weights or tokenizer; data that is missing, not JSON lines or holding malformed lines;
// pairs for the wrong objective; held-out data missing for evaluation; a micro-batch larger than
// the data; a CPU run that does not fit this machine) is found before anything is launched.
// The Launch page runs it off its UI thread as the fields change, `shard run` before a start.
// Each fix names the setting the way its front end spells it: the studio's field or checkbox,
// the CLI's flag (docs/ARCHITECTURE.md, "From a plan to the ranks").
#pragma once

#include <cstdint>

#include <QString>
#include <QStringList>

#include "protocol/run_spec.h"

namespace shard::jobs {

// Whose words a message uses for the settings it names.
enum class Wording { Cli, Studio };

enum class Setting {
    RunName,
    Model,
    DataFiles,
    SkipBadLines,
    Objective,
    EvalData,
    EvalEvery,
    MicroBatch,
    Ranks,
    SeqLen,
    Checkpointing,
    SamplePrompts,
    Packing,
    GradAccum,
    Strategy,
    Offload,
    Precision,
    LearningRate,
    Steps,
    Warmup,
    TensorParallel,
    PipelineParallel,
    VirtualStages,
    SequenceParallel,
    Method,
    SampleEvery,
    Count, // not a setting: how many there are
};
// "--micro-batch" (the train flag) / "“Micro-batch”" (the Launch page's field) and so on.
QString settingName(Setting setting, Wording wording);

// An engine message (a failed run's error) with each train flag it names said as the Launch
// page names it: "… (pass --skip-bad-lines …)" gains " On the Launch page: --skip-bad-lines is
// “Skip malformed lines”." The message is unchanged when it names none.
QString inStudioWords(const QString& engineMessage);

struct PreflightInput {
    protocol::RunSpec spec;
    QString runName;            // as the user gave it (the message about its folder names it)
    bool checkFiles = true;     // the model, data and prompts are read on this machine
    bool checkRunFolder = true; // spec.outDir is on this machine and must not hold a run yet
    bool checkFit = true;       // a CPU run's ranks share this machine's memory
    Wording wording = Wording::Cli;
};

// What stops a start, by the part of the form it concerns (empty = fine), and what only warns.
struct Preflight {
    QString name;     // the run folder already holds a run
    QString model;    // not a model folder, no weights, no tokenizer
    QString data;     // missing, not JSON lines, malformed lines, wrong kind, smaller than a batch
    QString fit;      // the planner says a CPU run does not fit this machine
    QString schedule; // warning: warm-up or checkpoint interval as long as the run
    QString dataNote; // warning: malformed lines that will be skipped
    int64_t trainRecords = -1; // records a step draws from; -1: the data was not read
    int64_t badLines = 0;      // malformed lines found (skipped or not)
    // DPO / ORPO: the first pairs of the data as the model sees them (through the chat template,
    // cut to the sequence length; a line that is no usable pair says why); "" when the data
    // was not read here.
    QString pairPreview;

    bool blocking() const;
    QString first() const;   // the first blocking problem
    QStringList all() const; // every blocking problem, in form order
};

// Reads the model's config, the tokenizer and every data file once (a data scan is remembered
// while the files are unchanged): call it off a UI thread.
Preflight preflight(const PreflightInput& input);

} // namespace shard::jobs
