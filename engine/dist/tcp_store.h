// The rendezvous key-value store: a c10d::Store whose server (in rank 0) listens on exactly the
// address it is given (c10d::TCPStore in LibTorch 1.13 listens on every interface). Clients
// speak a length-prefixed request/response protocol over one TCP connection each; the server
// answers each connection on its own thread, so blocking gets and waits do not stall others.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace shard::dist {

class TcpStoreServer;

class TcpStore final : public c10d::Store {
public:
    // Serves (when server is set) and connects to host:port. The server binds exactly host
    // (SO_REUSEADDR); port 0 picks a free one (see port()). A client retries a refused
    // connection until timeout. Throws std::runtime_error: "port P on H is in use", "cannot
    // connect to H:P (...)".
    TcpStore(const std::string& host, int port, bool server, std::chrono::milliseconds timeout);
    ~TcpStore() override;

    int port() const { return m_port; }

    // Counts this client in (as `rank`, -1 when it does not say) and waits until `count`
    // clients have done so, within the timeout. The timeout's message names the ranks that did
    // not join, each with its node when the ranks fill nodes of ranksPerNode (> 0) in order.
    void waitForWorkers(int count, int rank = -1, int ranksPerNode = 0);

    void set(const std::string& key, const std::vector<uint8_t>& value) override;
    std::vector<uint8_t> compareSet(const std::string& key,
        const std::vector<uint8_t>& currentValue, const std::vector<uint8_t>& newValue) override;
    std::vector<uint8_t> get(const std::string& key) override;
    int64_t add(const std::string& key, int64_t value) override;
    bool deleteKey(const std::string& key) override;
    bool check(const std::vector<std::string>& keys) override;
    int64_t getNumKeys() override;
    void wait(const std::vector<std::string>& keys) override;
    void wait(
        const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
    // A second connection to the same server (c10d::Store::clone in LibTorch >= 2.5).
    c10::intrusive_ptr<c10d::Store> clone();

    // A client of host:port that keeps `server` (possibly null) alive: used by clone().
    TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout,
        std::shared_ptr<TcpStoreServer> server);

private:
    std::vector<uint8_t> request(const std::vector<uint8_t>& message);
    std::string where() const;

    std::string m_host;
    int m_port = 0;
    std::shared_ptr<TcpStoreServer> m_server; // set in the serving store and its clones
    std::mutex m_mutex;                       // one request in flight per connection
    int m_fd = -1;
};

} // namespace shard::dist
