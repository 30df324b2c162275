// Preference objectives on pairs (prompt, chosen, rejected): DPO with its sigmoid, IPO and
// conservative (label-smoothed) losses, and ORPO, from the papers' formulas as Hugging Face TRL
// computes them (DPOTrainer.dpo_loss, ORPOTrainer.odds_ratio_loss). The loop feeds sequence
// log-probabilities; this file owns the arithmetic and the names of the metrics.
//
//   DPO  z = (pi_c - pi_r) - (ref_c - ref_r)
//        sigmoid: -(1 - e) log s(beta z) - e log s(-beta z)     (e: label smoothing, cDPO)
//        ipo:     (z - 1 / (2 beta))^2, on log-probabilities averaged over the answer's tokens
//        rewards  beta (pi - ref) of each answer
//   ORPO a = the answer's mean token log-probability
//        log_odds = (a_c - a_r) - (log(1 - e^a_c) - log(1 - e^a_r))
//        loss = NLL of the chosen answers (mean over their tokens) - lambda log s(log_odds)
//        rewards  lambda a of each answer
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "protocol/run_spec.h"

namespace shard::engine {

struct PreferenceConfig {
    std::string objective = "dpo"; // dpo, orpo
    std::string dpoLoss = "sigmoid";
    double beta = 0.1; // DPO's beta; ORPO's lambda
    double labelSmoothing = 0.0;
    // The weight of the chosen answers' NLL (mean over their tokens) added to the loss: ORPO's
    // is 1; DPO's is --dpo-nll-weight (TRL's rpo_alpha), 0 by default.
    double nllWeight = 0.0;
    static PreferenceConfig fromSpec(const protocol::RunSpec& spec);
};

// Per pair (P,), fp64: the answers' summed token log-probabilities and their token counts.
struct PairLogProbs {
    at::Tensor chosen;
    at::Tensor rejected;
    at::Tensor chosenTokens;
    at::Tensor rejectedTokens;
};

// Index of each per-pair statistic in PreferenceLoss::stats's columns and their names in the
// metric records (TRL's, so curves line up with TRL runs read by the importer).
enum PreferenceStat {
    kRewardChosen,
    kRewardRejected,
    kRewardAccuracy, // 1 where the chosen reward is above the rejected one
    kRewardMargin,
    kLogpChosen, // the answers' summed log-probabilities (policy)
    kLogpRejected,
    kLogOddsRatio, // ORPO: log s(log_odds)
    kLogOdds,      // ORPO
    kPreferenceStatCount
};
const std::vector<std::string>& preferenceStatNames(const std::string& objective);

struct PreferenceLoss {
    at::Tensor losses; // (P,) fp64, differentiable: the pair term (ORPO: -lambda log s(log_odds))
    at::Tensor stats;  // (P, kPreferenceStatCount) fp64, detached
};

// reference: DPO's; unused by ORPO (may be null).
PreferenceLoss preferenceLoss(
    const PreferenceConfig& config, const PairLogProbs& policy, const PairLogProbs* reference);

} // namespace shard::engine
