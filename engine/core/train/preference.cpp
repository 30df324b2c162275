// The preference losses (see preference.h).
#include "core/train/preference.h"

#include <stdexcept>

#include <ATen/ATen.h>

namespace shard::engine {

PreferenceConfig PreferenceConfig::fromSpec(const protocol::RunSpec& spec)
{
    PreferenceConfig c;
    c.objective = spec.objective;
    c.dpoLoss = spec.dpoLoss;
    c.beta = spec.objective == "orpo" ? spec.orpoLambda : spec.dpoBeta;
    c.labelSmoothing = spec.dpoLabelSmoothing;
    c.nllWeight = spec.objective == "orpo" ? 1.0 : spec.dpoNllWeight;
    return c;
}

const std::vector<std::string>& preferenceStatNames(const std::string& objective)
{
    static const std::vector<std::string> dpo {"rewards/chosen", "rewards/rejected",
        "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"};
    static const std::vector<std::string> orpo {"rewards/chosen", "rewards/rejected",
        "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected", "log_odds_ratio",
        "log_odds_chosen"};
    return objective == "orpo" ? orpo : dpo;
}

PreferenceLoss preferenceLoss(
    const PreferenceConfig& config, const PairLogProbs& policy, const PairLogProbs* reference)
{
    const at::Tensor pc = policy.chosen.to(at::kDouble);
    const at::Tensor pr = policy.rejected.to(at::kDouble);
    const double beta = config.beta;
    PreferenceLoss out;
    at::Tensor rewardC, rewardR, logOddsRatio, logOdds;
    if (config.objective == "dpo") {
        if (!reference)
            throw std::runtime_error("DPO needs the reference log-probabilities");
        at::Tensor rc = reference->chosen.to(at::kDouble);
        at::Tensor rr = reference->rejected.to(at::kDouble);
        at::Tensor c = pc, r = pr;
        if (config.dpoLoss == "ipo") {
            // IPO on the answers' mean token log-probabilities (as TRL).
            const at::Tensor nc = policy.chosenTokens.to(at::kDouble).clamp_min(1);
            const at::Tensor nr = policy.rejectedTokens.to(at::kDouble).clamp_min(1);
            c = pc / nc;
            r = pr / nr;
            rc = rc / nc;
            rr = rr / nr;
        }
        const at::Tensor z = (c - r) - (rc - rr);
        if (config.dpoLoss == "ipo") {
            out.losses = (z - 1.0 / (2.0 * beta)).pow(2);
        } else {
            const double e = config.labelSmoothing;
            out.losses = -at::log_sigmoid(z * beta) * (1.0 - e) - at::log_sigmoid(z * -beta) * e;
        }
        rewardC = ((c - rc) * beta).detach();
        rewardR = ((r - rr) * beta).detach();
        logOddsRatio = at::zeros_like(rewardC);
        logOdds = at::zeros_like(rewardC);
    } else if (config.objective == "orpo") {
        const at::Tensor ac = pc / policy.chosenTokens.to(at::kDouble).clamp_min(1);
        const at::Tensor ar = pr / policy.rejectedTokens.to(at::kDouble).clamp_min(1);
        // log(1 - e^a) as log(-expm1(a)): exact near a = 0, where 1 - e^a cancels.
        const at::Tensor odds = (ac - ar) - (at::log(-at::expm1(ac)) - at::log(-at::expm1(ar)));
        const at::Tensor ratio = at::log_sigmoid(odds);
        out.losses = -ratio * beta;
        rewardC = (ac * beta).detach();
        rewardR = (ar * beta).detach();
        logOddsRatio = ratio.detach();
        logOdds = odds.detach();
    } else {
        throw std::runtime_error("preference loss: unknown objective '" + config.objective + "'");
    }
    out.stats = at::stack({rewardC, rewardR, rewardC.gt(rewardR).to(at::kDouble), rewardC - rewardR,
                              pc.detach(), pr.detach(), logOddsRatio, logOdds},
        1);
    return out;
}

} // namespace shard::engine
