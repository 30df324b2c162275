// The argument checks both backends share; every error says which call and argument is wrong.
#include "dist/backend_communicator.h"

#include <stdexcept>

namespace shard::dist {

BackendCommunicator::BackendCommunicator(
    int rank, int worldSize, std::string backend, c10::DeviceType device)
    : Communicator(rank, worldSize)
    , m_backend(std::move(backend))
    , m_device(device)
{
}

void BackendCommunicator::checkTensor(const at::Tensor& t, const char* op, const char* name) const
{
    if (!t.defined())
        throw std::invalid_argument(std::string(op) + ": " + name + " is undefined");
    if (t.device().type() != m_device)
        throw std::invalid_argument(std::string(op) + ": " + name + " is on " + t.device().str()
            + "; the " + m_backend + " backend takes "
            + (m_device == c10::DeviceType::CUDA ? "CUDA" : "CPU") + " tensors");
    if (!t.is_contiguous())
        throw std::invalid_argument(
            std::string(op) + ": " + name + " must be contiguous (call .contiguous())");
}

void BackendCommunicator::countTraffic(
    Collective kind, const at::Tensor& output, const at::Tensor& input, int root)
{
    const at::Tensor& full = output.numel() >= input.numel() ? output : input;
    count(kind,
        trafficBytes(
            m_backend, kind, full.numel(), full.element_size(), worldSize(), rank(), root));
}

WorkPtr BackendCommunicator::allGather(const at::Tensor& output, const at::Tensor& input)
{
    checkTensor(output, "allGather", "output");
    checkTensor(input, "allGather", "input");
    const int64_t w = worldSize();
    if (output.scalar_type() != input.scalar_type())
        throw std::invalid_argument("allGather: output is "
            + std::string(c10::toString(output.scalar_type())) + " but input is "
            + c10::toString(input.scalar_type()));
    if (output.numel() != w * input.numel())
        throw std::invalid_argument("allGather: output has " + std::to_string(output.numel())
            + " elements, expected world size x input = " + std::to_string(w * input.numel()));
    return issue(Collective::AllGather, output, input, 0);
}

WorkPtr BackendCommunicator::reduceScatter(const at::Tensor& output, const at::Tensor& input)
{
    checkTensor(output, "reduceScatter", "output");
    checkTensor(input, "reduceScatter", "input");
    const int64_t w = worldSize();
    const bool widening = output.scalar_type() == at::kFloat
        && (input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf);
    if (output.scalar_type() != input.scalar_type() && !(widening && sumsIntoWiderOutput()))
        throw std::invalid_argument("reduceScatter: output and input dtypes differ (output "
            + std::string(c10::toString(output.scalar_type())) + ", input "
            + c10::toString(input.scalar_type()) + "; " + m_backend
            + (sumsIntoWiderOutput() ? " takes only a Float output for a BFloat16 or Half input)"
                                     : " takes the same dtype for both)"));
    if (input.numel() != w * output.numel())
        throw std::invalid_argument("reduceScatter: input has " + std::to_string(input.numel())
            + " elements, expected world size x output = " + std::to_string(w * output.numel()));
    return issue(Collective::ReduceScatter, output, input, 0);
}

WorkPtr BackendCommunicator::allReduce(const at::Tensor& tensor)
{
    checkTensor(tensor, "allReduce", "tensor");
    return issue(Collective::AllReduce, tensor, tensor, 0);
}

WorkPtr BackendCommunicator::broadcast(const at::Tensor& tensor, int root)
{
    checkTensor(tensor, "broadcast", "tensor");
    if (root < 0 || root >= worldSize())
        throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is outside 0.."
            + std::to_string(worldSize() - 1));
    return issue(Collective::Broadcast, tensor, tensor, root);
}

std::shared_ptr<Communicator> BackendCommunicator::newGroup(const std::vector<int>& ranks)
{
    if (ranks.empty())
        throw std::invalid_argument("newGroup: empty rank list");
    int myIndex = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
        if (ranks[i] < 0 || ranks[i] >= worldSize() || (i > 0 && ranks[i] <= ranks[i - 1]))
            throw std::invalid_argument("newGroup: ranks must be ascending, unique and in 0.."
                + std::to_string(worldSize() - 1));
        if (ranks[i] == rank())
            myIndex = static_cast<int>(i);
    }
    return makeGroup(ranks, myIndex);
}

} // namespace shard::dist
