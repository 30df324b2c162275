// TcpStore: server thread per connection over a mutex-guarded map; waits use one condition
// variable. Frames are a 4-byte length and a body: requests start with an op byte, responses
// with a status byte.
#include "dist/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include "protocol/launch_args.h"

namespace shard::dist {

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

enum class Op : uint8_t { Set, CompareSet, Get, Add, Delete, Check, NumKeys, Wait, Join };
enum class Status : uint8_t { Ok, Timeout };

constexpr uint32_t kMaxFrame = 1u << 30;

void putU32(Bytes& b, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void putI64(Bytes& b, int64_t v)
{
    for (int i = 0; i < 8; ++i)
        b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

void putBytes(Bytes& b, const uint8_t* data, size_t n)
{
    putU32(b, static_cast<uint32_t>(n));
    b.insert(b.end(), data, data + n);
}

void putBytes(Bytes& b, const Bytes& v)
{
    putBytes(b, v.data(), v.size());
}

void putString(Bytes& b, const std::string& s)
{
    putBytes(b, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Reads fields of one frame body; throws on a truncated body (a protocol error).
class Reader {
public:
    explicit Reader(const Bytes& b)
        : m_b(b)
    {
    }
    uint8_t u8() { return take(1)[0]; }
    uint32_t u32()
    {
        const uint8_t* p = take(4);
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i)
            v |= static_cast<uint32_t>(p[i]) << (8 * i);
        return v;
    }
    int64_t i64()
    {
        const uint8_t* p = take(8);
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i)
            v |= static_cast<uint64_t>(p[i]) << (8 * i);
        return static_cast<int64_t>(v);
    }
    Bytes bytes()
    {
        uint32_t n = u32();
        const uint8_t* p = take(n);
        return Bytes(p, p + n);
    }
    std::string string()
    {
        uint32_t n = u32();
        const uint8_t* p = take(n);
        return std::string(reinterpret_cast<const char*>(p), n);
    }
    std::vector<std::string> strings()
    {
        std::vector<std::string> v(u32());
        for (auto& s : v)
            s = string();
        return v;
    }

private:
    const uint8_t* take(size_t n)
    {
        if (m_b.size() - m_pos < n)
            throw std::runtime_error("store: truncated message");
        const uint8_t* p = m_b.data() + m_pos;
        m_pos += n;
        return p;
    }
    const Bytes& m_b;
    size_t m_pos = 0;
};

// False on EOF or error.
bool readAll(int fd, uint8_t* data, size_t n)
{
    while (n > 0) {
        ssize_t got = ::recv(fd, data, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        data += got;
        n -= static_cast<size_t>(got);
    }
    return true;
}

bool writeAll(int fd, const uint8_t* data, size_t n)
{
    while (n > 0) {
        ssize_t put = ::send(fd, data, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return false;
        data += put;
        n -= static_cast<size_t>(put);
    }
    return true;
}

bool readFrame(int fd, Bytes& body)
{
    uint8_t head[4];
    if (!readAll(fd, head, 4))
        return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i)
        n |= static_cast<uint32_t>(head[i]) << (8 * i);
    if (n > kMaxFrame)
        return false;
    body.resize(n);
    return readAll(fd, body.data(), n);
}

bool writeFrame(int fd, const Bytes& body)
{
    Bytes frame;
    frame.reserve(body.size() + 4);
    putU32(frame, static_cast<uint32_t>(body.size()));
    frame.insert(frame.end(), body.begin(), body.end());
    return writeAll(fd, frame.data(), frame.size());
}

struct AddrInfo {
    addrinfo* list = nullptr;
    ~AddrInfo() { ::freeaddrinfo(list); }
};

void resolveHost(const std::string& host, int port, AddrInfo& out)
{
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    const std::string service = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &out.list);
    if (rc != 0 || !out.list)
        throw std::runtime_error(
            "cannot resolve " + host + " (" + ::gai_strerror(rc) + "); check MASTER_ADDR");
}

Clock::time_point deadlineAfter(std::chrono::milliseconds timeout)
{
    if (timeout <= std::chrono::milliseconds::zero())
        return Clock::time_point::max();
    return Clock::now() + timeout;
}

std::string keyList(const std::vector<std::string>& keys)
{
    std::string s;
    for (const auto& k : keys)
        s += (s.empty() ? "'" : ", '") + k + "'";
    return s;
}

} // namespace

class TcpStoreServer {
public:
    TcpStoreServer(const std::string& host, int port)
    {
        m_listenFd = inheritedListenFd(port);
        if (m_listenFd < 0)
            bindAndListen(host, port);
        m_port = localPort(m_listenFd);
        if (::pipe2(m_wake, O_CLOEXEC) != 0) {
            ::close(m_listenFd);
            throw std::runtime_error(std::string("pipe() failed: ") + std::strerror(errno));
        }
        m_acceptThread = std::thread([this] { acceptLoop(); });
    }

    // Under `shard-worker launch`, rank 0 gets the socket the launcher opened on MASTER_PORT
    // (protocol::kStoreListenFdEnv); -1 when there is none, or it is not a socket listening on
    // `port` (then this rank binds the port itself, as a rank started by hand does).
    static int inheritedListenFd(int port)
    {
        const char* value = std::getenv(protocol::kStoreListenFdEnv);
        if (!value)
            return -1;
        const int fd = std::atoi(value);
        ::unsetenv(protocol::kStoreListenFdEnv); // one store per process takes it
        int listening = 0;
        socklen_t len = sizeof listening;
        if (fd < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0
            || !listening || localPort(fd) != port)
            return -1;
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        return fd;
    }

    static int localPort(int fd)
    {
        sockaddr_storage bound {};
        socklen_t len = sizeof bound;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
        return bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }

    void bindAndListen(const std::string& host, int port)
    {
        AddrInfo ai;
        resolveHost(host, port, ai);
        const addrinfo* a = ai.list;
        m_listenFd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (m_listenFd < 0)
            throw std::runtime_error(std::string("socket() failed: ") + std::strerror(errno));
        int one = 1;
        ::setsockopt(m_listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(m_listenFd, a->ai_addr, a->ai_addrlen) != 0) {
            const int err = errno;
            ::close(m_listenFd);
            if (err == EADDRINUSE)
                throw std::runtime_error("port " + std::to_string(port) + " on " + host
                    + " is in use; pick another MASTER_PORT");
            throw std::runtime_error("cannot bind " + host + ":" + std::to_string(port) + ": "
                + std::strerror(err) + "; MASTER_ADDR must be an address of this host");
        }
        if (::listen(m_listenFd, 1024) != 0) {
            const int err = errno;
            ::close(m_listenFd);
            throw std::runtime_error(std::string("listen() failed: ") + std::strerror(err));
        }
    }

    ~TcpStoreServer()
    {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stopping = true;
            for (int fd : m_clientFds)
                ::shutdown(fd, SHUT_RDWR);
        }
        m_changed.notify_all();
        const char byte = 0;
        [[maybe_unused]] ssize_t n = ::write(m_wake[1], &byte, 1);
        m_acceptThread.join();
        for (auto& t : m_clientThreads)
            t.join();
        for (int fd : m_clientFds)
            ::close(fd);
        ::close(m_listenFd);
        ::close(m_wake[0]);
        ::close(m_wake[1]);
    }

    int port() const { return m_port; }

private:
    void acceptLoop()
    {
        while (true) {
            pollfd p[2] = {{m_listenFd, POLLIN, 0}, {m_wake[0], POLLIN, 0}};
            int rc = ::poll(p, 2, -1);
            if (rc < 0 && errno == EINTR)
                continue;
            if (rc < 0 || (p[1].revents & POLLIN))
                return;
            int fd = ::accept4(m_listenFd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0)
                continue;
            int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            std::lock_guard<std::mutex> lock(m_mutex);
            if (m_stopping) {
                ::close(fd);
                return;
            }
            m_clientFds.push_back(fd);
            m_clientThreads.emplace_back([this, fd] { serve(fd); });
        }
    }

    void serve(int fd)
    {
        Bytes message;
        while (readFrame(fd, message)) {
            Bytes reply;
            try {
                reply = handle(message);
            } catch (const std::exception&) {
                break; // a malformed request: drop the connection
            }
            if (!writeFrame(fd, reply))
                break;
        }
        ::shutdown(fd, SHUT_RDWR);
    }

    // Waits (m_mutex held through lock) until all keys exist; false on timeout or stop.
    bool waitKeys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
        Clock::time_point deadline)
    {
        auto present = [&] {
            for (const auto& k : keys)
                if (!m_data.count(k))
                    return false;
            return true;
        };
        while (!present()) {
            if (m_stopping)
                return false;
            if (deadline == Clock::time_point::max())
                m_changed.wait(lock);
            else if (m_changed.wait_until(lock, deadline) == std::cv_status::timeout)
                return present();
        }
        return true;
    }

    Bytes handle(const Bytes& message)
    {
        Reader in(message);
        Bytes out;
        std::unique_lock<std::mutex> lock(m_mutex);
        switch (static_cast<Op>(in.u8())) {
        case Op::Set: {
            std::string key = in.string();
            m_data[key] = in.bytes();
            m_changed.notify_all();
            out.push_back(uint8_t(Status::Ok));
            break;
        }
        case Op::CompareSet: {
            std::string key = in.string();
            Bytes expected = in.bytes();
            Bytes desired = in.bytes();
            auto it = m_data.find(key);
            out.push_back(uint8_t(Status::Ok));
            if (it == m_data.end()) {
                if (expected.empty()) {
                    m_data[key] = desired;
                    m_changed.notify_all();
                    putBytes(out, desired);
                } else {
                    putBytes(out, expected);
                }
            } else if (it->second == expected) {
                it->second = desired;
                m_changed.notify_all();
                putBytes(out, desired);
            } else {
                putBytes(out, it->second);
            }
            break;
        }
        case Op::Get: {
            std::string key = in.string();
            auto deadline = deadlineAfter(std::chrono::milliseconds(in.i64()));
            if (!waitKeys(lock, {key}, deadline)) {
                out.push_back(uint8_t(Status::Timeout));
                break;
            }
            out.push_back(uint8_t(Status::Ok));
            putBytes(out, m_data[key]);
            break;
        }
        case Op::Add: {
            std::string key = in.string();
            int64_t value = in.i64();
            auto it = m_data.find(key);
            if (it != m_data.end())
                value += std::stoll(std::string(it->second.begin(), it->second.end()));
            const std::string text = std::to_string(value);
            m_data[key] = Bytes(text.begin(), text.end());
            m_changed.notify_all();
            out.push_back(uint8_t(Status::Ok));
            putI64(out, value);
            break;
        }
        case Op::Delete: {
            bool erased = m_data.erase(in.string()) > 0;
            out.push_back(uint8_t(Status::Ok));
            out.push_back(erased ? 1 : 0);
            break;
        }
        case Op::Check: {
            bool all = true;
            for (const auto& k : in.strings())
                all = all && m_data.count(k) > 0;
            out.push_back(uint8_t(Status::Ok));
            out.push_back(all ? 1 : 0);
            break;
        }
        case Op::NumKeys:
            out.push_back(uint8_t(Status::Ok));
            putI64(out, static_cast<int64_t>(m_data.size()));
            break;
        case Op::Wait: {
            auto keys = in.strings();
            auto deadline = deadlineAfter(std::chrono::milliseconds(in.i64()));
            out.push_back(uint8_t(waitKeys(lock, keys, deadline) ? Status::Ok : Status::Timeout));
            break;
        }
        case Op::Join: {
            const int64_t count = in.i64();
            auto deadline = deadlineAfter(std::chrono::milliseconds(in.i64()));
            const int64_t rank = in.i64(); // -1: not said
            ++m_joined;
            if (rank >= 0)
                m_joinedRanks.insert(rank);
            m_changed.notify_all();
            bool ok = m_changed.wait_until(
                lock, deadline, [&] { return m_stopping || m_joined >= count; });
            out.push_back(uint8_t(ok && m_joined >= count ? Status::Ok : Status::Timeout));
            putI64(out, m_joined);
            // The ranks below `count` that have not joined (when every joiner said its rank).
            std::vector<int64_t> missing;
            if (static_cast<int64_t>(m_joinedRanks.size()) == m_joined)
                for (int64_t r = 0; r < count; ++r)
                    if (!m_joinedRanks.count(r))
                        missing.push_back(r);
            putI64(out, static_cast<int64_t>(missing.size()));
            for (int64_t r : missing)
                putI64(out, r);
            break;
        }
        default:
            throw std::runtime_error("store: unknown request");
        }
        return out;
    }

    int m_listenFd = -1;
    int m_wake[2] = {-1, -1};
    int m_port = 0;
    std::thread m_acceptThread;
    std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_stopping = false;
    std::vector<int> m_clientFds;
    std::vector<std::thread> m_clientThreads;
    std::map<std::string, Bytes> m_data;
    int64_t m_joined = 0;
    std::set<int64_t> m_joinedRanks;
};

TcpStore::TcpStore(
    const std::string& host, int port, bool server, std::chrono::milliseconds timeout)
    : TcpStore(host, port, timeout, server ? std::make_shared<TcpStoreServer>(host, port) : nullptr)
{
}

TcpStore::TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout,
    std::shared_ptr<TcpStoreServer> server)
    : c10d::Store(timeout)
    , m_host(host)
    , m_port(server ? server->port() : port)
    , m_server(std::move(server))
{
    AddrInfo ai;
    resolveHost(m_host, m_port, ai);
    const auto deadline = deadlineAfter(timeout);
    std::string lastError = "no address";
    while (true) {
        for (const addrinfo* a = ai.list; a; a = a->ai_next) {
            int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0)
                continue;
            if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                int one = 1;
                ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                m_fd = fd;
                return;
            }
            lastError = std::strerror(errno);
            ::close(fd);
        }
        if (Clock::now() + std::chrono::milliseconds(100) >= deadline)
            throw std::runtime_error("cannot connect to " + where() + " (" + lastError + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

TcpStore::~TcpStore()
{
    if (m_fd >= 0)
        ::close(m_fd);
}

std::string TcpStore::where() const
{
    return m_host + ":" + std::to_string(m_port);
}

c10::intrusive_ptr<c10d::Store> TcpStore::clone()
{
    return c10::make_intrusive<TcpStore>(m_host, m_port, timeout_, m_server);
}

Bytes TcpStore::request(const Bytes& message)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    Bytes reply;
    if (!writeFrame(m_fd, message) || !readFrame(m_fd, reply) || reply.empty())
        throw std::runtime_error("store: lost the connection to " + where()
            + " (the rank 0 process serving it exited?)");
    return reply;
}

void TcpStore::waitForWorkers(int count, int rank, int ranksPerNode)
{
    Bytes m {uint8_t(Op::Join)};
    putI64(m, count);
    putI64(m, timeout_.count());
    putI64(m, rank);
    Bytes reply = request(m);
    Reader in(reply);
    if (static_cast<Status>(in.u8()) == Status::Ok)
        return;
    std::string what = "timed out after " + std::to_string(timeout_.count())
        + " ms: " + std::to_string(in.i64()) + " of " + std::to_string(count)
        + " ranks connected to the store on " + where();
    const int64_t missing = in.i64();
    // The node of a rank, where the ranks fill nodes of ranksPerNode in order (several nodes).
    const bool nodes = ranksPerNode > 0 && count > ranksPerNode && count % ranksPerNode == 0;
    for (int64_t i = 0; i < missing; ++i) {
        const int64_t r = in.i64();
        if (i == 0)
            what += "; missing: ";
        else if (i == 8) {
            what += ", and " + std::to_string(missing - 8) + " more";
            break;
        } else
            what += ", ";
        what += "rank " + std::to_string(r);
        if (nodes)
            what += " (node " + std::to_string(r / ranksPerNode) + ")";
    }
    throw std::runtime_error(what);
}

void TcpStore::set(const std::string& key, const Bytes& value)
{
    Bytes m {uint8_t(Op::Set)};
    putString(m, key);
    putBytes(m, value);
    request(m);
}

Bytes TcpStore::compareSet(const std::string& key, const Bytes& currentValue, const Bytes& newValue)
{
    Bytes m {uint8_t(Op::CompareSet)};
    putString(m, key);
    putBytes(m, currentValue);
    putBytes(m, newValue);
    Bytes reply = request(m);
    Reader in(reply);
    in.u8();
    return in.bytes();
}

Bytes TcpStore::get(const std::string& key)
{
    Bytes m {uint8_t(Op::Get)};
    putString(m, key);
    putI64(m, timeout_.count());
    Bytes reply = request(m);
    Reader in(reply);
    if (static_cast<Status>(in.u8()) != Status::Ok)
        throw std::runtime_error("store: timed out after " + std::to_string(timeout_.count())
            + " ms waiting for key '" + key + "' on " + where());
    return in.bytes();
}

int64_t TcpStore::add(const std::string& key, int64_t value)
{
    Bytes m {uint8_t(Op::Add)};
    putString(m, key);
    putI64(m, value);
    Bytes reply = request(m);
    Reader in(reply);
    in.u8();
    return in.i64();
}

bool TcpStore::deleteKey(const std::string& key)
{
    Bytes m {uint8_t(Op::Delete)};
    putString(m, key);
    Bytes reply = request(m);
    return reply.size() >= 2 && reply[1] == 1;
}

bool TcpStore::check(const std::vector<std::string>& keys)
{
    Bytes m {uint8_t(Op::Check)};
    putU32(m, static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys)
        putString(m, k);
    Bytes reply = request(m);
    return reply.size() >= 2 && reply[1] == 1;
}

int64_t TcpStore::getNumKeys()
{
    Bytes reply = request(Bytes {uint8_t(Op::NumKeys)});
    Reader in(reply);
    in.u8();
    return in.i64();
}

void TcpStore::wait(const std::vector<std::string>& keys)
{
    wait(keys, timeout_);
}

void TcpStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout)
{
    Bytes m {uint8_t(Op::Wait)};
    putU32(m, static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys)
        putString(m, k);
    putI64(m, timeout.count());
    Bytes reply = request(m);
    if (static_cast<Status>(reply[0]) != Status::Ok)
        throw std::runtime_error("store: timed out after " + std::to_string(timeout.count())
            + " ms waiting for key(s) " + keyList(keys) + " on " + where());
}

} // namespace shard::dist
