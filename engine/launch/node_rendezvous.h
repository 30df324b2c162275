// Launcher-to-launcher rendezvous for multi-node runs: node 0 listens on --master-addr:
// --master-port, the other nodes join; node 0 then opens the listening socket of the ranks'
// TCPStore (on a free port) and sends its port to every node; the launcher hands the socket to
// global rank 0. The connections stay open as a control channel: a node whose ranks
// fail sends ABORT (with its failure as JSON), a node that finishes sends DONE, and a lost
// connection stops the run. With --max-restarts, a node whose ranks are all down after a
// failure sends STOPPED, and node 0 answers every node with RESTART (all start again from the
// latest checkpoint, on the same store socket) or END.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace shard::launch {

// A listening socket on host:port, or a clear error ("port 29500 on 127.0.0.1 is in use ...").
int listenOn(const std::string& host, int port, int backlog);
// The port a bound socket listens on.
int boundPort(int fd);

class NodeRendezvous {
public:
    struct Peer {
        int nodeRank = 0;
        int fd = -1;
        std::string buffer; // bytes read but not yet split into lines
        bool done = false;
        bool aborted = false; // ABORT: it stopped the run (its ranks failed, or it was told to)
        bool stopped = false; // STOPPED: its ranks are down after a failure (this attempt)
        bool closed = false;
    };

    // Blocks until every node has joined (node 0) or node 0 said GO (other nodes), or throws
    // std::runtime_error naming the nodes that never joined once timeout passes.
    NodeRendezvous(int nnodes, int nodeRank, int nprocPerNode, const std::string& masterAddr,
        int masterPort, std::chrono::milliseconds timeout);
    ~NodeRendezvous();
    NodeRendezvous(const NodeRendezvous&) = delete;
    NodeRendezvous& operator=(const NodeRendezvous&) = delete;

    // The port the ranks' TCPStore (rank 0) listens on.
    int storePort() const { return m_storePort; }
    // Node 0: the store's listening socket, which the caller now owns (-1 on other nodes, or
    // once taken).
    int takeStoreListenFd()
    {
        const int fd = m_storeListenFd;
        m_storeListenFd = -1;
        return fd;
    }
    // Node 0: one peer per other node. Other nodes: one peer, node 0.
    std::vector<Peer>& peers() { return m_peers; }
    // Sends one line ("ABORT ...", "DONE") to every open peer; errors are ignored (the peer may
    // already be gone).
    void sendAll(const std::string& line);
    // Reads what is available on peer's socket; returns the complete lines. Sets closed on EOF.
    std::vector<std::string> readLines(Peer& peer);

private:
    int m_storePort = 0;
    int m_storeListenFd = -1;
    std::vector<Peer> m_peers;
};

} // namespace shard::launch
