// Plain TCP sockets, one line per message, deadlines everywhere: a node that never joins is an
// error after the rendezvous timeout, never a hang.
#include "launch/node_rendezvous.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "protocol/launch_args.h"

namespace shard::launch {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_storage resolve(const std::string& host, int port, socklen_t& len)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0 || !res)
        throw std::runtime_error("launch: cannot resolve host '" + host + "': " + gai_strerror(rc));
    sockaddr_storage addr {};
    std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
    len = res->ai_addrlen;
    freeaddrinfo(res);
    return addr;
}

int remainingMs(Clock::time_point deadline)
{
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

void sendLine(int fd, const std::string& line)
{
    std::string data = line + "\n";
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::runtime_error(
                std::string("launch: rendezvous send failed: ") + std::strerror(errno));
        off += static_cast<size_t>(n);
    }
}

// One line from fd before deadline; throws on timeout or EOF.
std::string readLineBefore(
    int fd, std::string& buffer, Clock::time_point deadline, const std::string& waitingFor)
{
    while (true) {
        auto nl = buffer.find('\n');
        if (nl != std::string::npos) {
            std::string line = buffer.substr(0, nl);
            buffer.erase(0, nl + 1);
            return line;
        }
        pollfd p {fd, POLLIN, 0};
        int rc = ::poll(&p, 1, remainingMs(deadline));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc == 0)
            throw std::runtime_error("timeout waiting for " + waitingFor);
        char chunk[512];
        ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            throw std::runtime_error("connection closed while waiting for " + waitingFor);
        buffer.append(chunk, static_cast<size_t>(n));
    }
}

std::string secondsText(std::chrono::milliseconds ms)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g s", ms.count() / 1000.0);
    return buf;
}

} // namespace

int listenOn(const std::string& host, int port, int backlog)
{
    socklen_t len = 0;
    sockaddr_storage addr = resolve(host, port, len);
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw std::runtime_error(std::string("launch: socket() failed: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        int err = errno;
        ::close(fd);
        if (err == EADDRINUSE)
            throw std::runtime_error("launch: port " + std::to_string(port) + " on " + host
                + " is in use; pick another --master-port (or 0 for a free one on a single node)");
        throw std::runtime_error("launch: cannot bind " + host + ":" + std::to_string(port) + ": "
            + std::strerror(err) + "; check --master-addr");
    }
    if (::listen(fd, backlog) != 0) {
        int err = errno;
        ::close(fd);
        throw std::runtime_error(std::string("launch: listen() failed: ") + std::strerror(err));
    }
    return fd;
}

int boundPort(int fd)
{
    sockaddr_storage addr {};
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    if (addr.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

NodeRendezvous::NodeRendezvous(int nnodes, int nodeRank, int nprocPerNode,
    const std::string& masterAddr, int masterPort, std::chrono::milliseconds timeout)
{
    const auto deadline = Clock::now() + timeout;
    const std::string where = masterAddr + ":" + std::to_string(masterPort);
    if (nodeRank == 0) {
        int listenFd = listenOn(masterAddr, masterPort, nnodes + 8);
        std::vector<bool> joined(static_cast<size_t>(nnodes), false);
        joined[0] = true;
        int missing = nnodes - 1;
        try {
            while (missing > 0) {
                pollfd p {listenFd, POLLIN, 0};
                int rc = ::poll(&p, 1, remainingMs(deadline));
                if (rc < 0 && errno == EINTR)
                    continue;
                if (rc == 0) {
                    std::string list;
                    for (int n = 1; n < nnodes; ++n)
                        if (!joined[static_cast<size_t>(n)])
                            list += (list.empty() ? "" : ", ") + std::to_string(n);
                    throw std::runtime_error("launch: rendezvous timed out after "
                        + secondsText(timeout) + " on " + where + ": node(s) " + list + " of "
                        + std::to_string(nnodes)
                        + " never joined; start 'launch' on every node with the same "
                          "--master-addr/--master-port, or raise --rdzv-timeout");
                }
                int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
                if (fd < 0)
                    continue;
                Peer peer;
                peer.fd = fd;
                std::string line;
                try {
                    line = readLineBefore(fd, peer.buffer, deadline, "a JOIN message");
                } catch (const std::exception&) {
                    ::close(fd);
                    continue;
                }
                int rank = -1, theirNodes = -1, theirProcs = -1;
                if (std::sscanf(line.c_str(), "JOIN %d %d %d", &rank, &theirNodes, &theirProcs)
                    != 3) {
                    ::close(fd); // not a launcher: ignore it
                    continue;
                }
                std::string reject;
                if (theirNodes != nnodes || theirProcs != nprocPerNode)
                    reject = "node " + std::to_string(rank) + " has --nnodes "
                        + std::to_string(theirNodes) + " --nproc-per-node "
                        + std::to_string(theirProcs) + ", node 0 has " + std::to_string(nnodes)
                        + " and " + std::to_string(nprocPerNode);
                else if (rank < 1 || rank >= nnodes)
                    reject = "--node-rank " + std::to_string(rank) + " is outside 1.."
                        + std::to_string(nnodes - 1);
                else if (joined[static_cast<size_t>(rank)])
                    reject = "two nodes claim --node-rank " + std::to_string(rank);
                if (!reject.empty()) {
                    try {
                        sendLine(fd, "REJECT " + reject);
                    } catch (const std::exception&) {
                    }
                    ::close(fd);
                    throw std::runtime_error("launch: rendezvous failed: " + reject);
                }
                joined[static_cast<size_t>(rank)] = true;
                --missing;
                peer.nodeRank = rank;
                m_peers.push_back(std::move(peer));
            }
            // The store's socket stays open from here to global rank 0 (the launcher hands it
            // over), so no other process can take the port in between.
            m_storeListenFd = listenOn(masterAddr, 0, protocol::kStoreBacklog);
            m_storePort = boundPort(m_storeListenFd);
            for (auto& peer : m_peers)
                sendLine(peer.fd, "GO " + std::to_string(m_storePort));
        } catch (...) {
            ::close(listenFd);
            if (m_storeListenFd >= 0)
                ::close(m_storeListenFd);
            m_storeListenFd = -1;
            for (auto& peer : m_peers)
                ::close(peer.fd);
            m_peers.clear();
            throw;
        }
        ::close(listenFd);
        return;
    }

    // Other nodes: connect (node 0 may start later), JOIN, wait for GO.
    socklen_t len = 0;
    sockaddr_storage addr = resolve(masterAddr, masterPort, len);
    int fd = -1;
    while (true) {
        fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0)
            break;
        if (fd >= 0)
            ::close(fd);
        fd = -1;
        if (remainingMs(deadline) == 0)
            throw std::runtime_error("launch: rendezvous timed out after " + secondsText(timeout)
                + ": node 0 never answered on " + where
                + "; start node 0's launcher, check --master-addr/--master-port, or raise "
                  "--rdzv-timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    Peer peer;
    peer.fd = fd;
    peer.nodeRank = 0;
    try {
        sendLine(fd,
            "JOIN " + std::to_string(nodeRank) + " " + std::to_string(nnodes) + " "
                + std::to_string(nprocPerNode));
        std::string line = readLineBefore(fd, peer.buffer, deadline, "node 0 to start the run");
        if (line.rfind("REJECT ", 0) == 0)
            throw std::runtime_error("launch: node 0 rejected this node: " + line.substr(7));
        if (std::sscanf(line.c_str(), "GO %d", &m_storePort) != 1)
            throw std::runtime_error("launch: unexpected rendezvous message '" + line + "'");
    } catch (const std::runtime_error& e) {
        ::close(fd);
        std::string what = e.what();
        if (what.rfind("launch:", 0) == 0)
            throw;
        throw std::runtime_error("launch: rendezvous with " + where + " failed after "
            + secondsText(timeout) + ": " + what
            + " (other nodes missing?); raise --rdzv-timeout or start every node");
    }
    m_peers.push_back(std::move(peer));
}

NodeRendezvous::~NodeRendezvous()
{
    if (m_storeListenFd >= 0)
        ::close(m_storeListenFd);
    for (auto& peer : m_peers)
        if (peer.fd >= 0)
            ::close(peer.fd);
}

void NodeRendezvous::sendAll(const std::string& line)
{
    for (auto& peer : m_peers) {
        if (peer.closed || peer.fd < 0)
            continue;
        try {
            sendLine(peer.fd, line);
        } catch (const std::exception&) {
        }
    }
}

std::vector<std::string> NodeRendezvous::readLines(Peer& peer)
{
    std::vector<std::string> lines;
    char chunk[512];
    ssize_t n = ::recv(peer.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        peer.closed = true;
    } else if (n > 0) {
        peer.buffer.append(chunk, static_cast<size_t>(n));
    }
    size_t nl;
    while ((nl = peer.buffer.find('\n')) != std::string::npos) {
        lines.push_back(peer.buffer.substr(0, nl));
        peer.buffer.erase(0, nl + 1);
    }
    return lines;
}

} // namespace shard::launch
