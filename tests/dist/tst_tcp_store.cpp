// TcpStore: every c10d::Store operation against a real server on loopback, blocking get/wait
// released by another client, timeouts, a busy port, nobody serving, and that the server
// listens on exactly the address it was given (127.0.0.2 is loopback too, but not asked for);
// a server adopts the listening socket a launcher hands it (SHARD_STORE_LISTEN_FD) and binds
// the port itself when the descriptor is not one listening on that port.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "dist/tcp_store.h"
#include "protocol/launch_args.h"

using shard::dist::TcpStore;
using namespace std::chrono_literals;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what)
{
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

template<typename Fn> std::string errorOf(Fn fn)
{
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

std::vector<uint8_t> bytes(const std::string& s)
{
    return {s.begin(), s.end()};
}

bool contains(const std::string& s, const std::string& needle)
{
    return s.find(needle) != std::string::npos;
}

// A socket listening on 127.0.0.1 (on a free port), as the launcher opens it; its port.
int listeningSocket(int& port)
{
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    return fd;
}

void inheritedSocket()
{
    using shard::protocol::kStoreListenFdEnv;
    // The handed-over socket is served: binding the port again would fail (it is listening here).
    int port = 0;
    const int fd = listeningSocket(port);
    ::setenv(kStoreListenFdEnv, std::to_string(fd).c_str(), 1);
    std::string error;
    try {
        TcpStore server("127.0.0.1", port, true, 2000ms);
        expect(std::getenv(kStoreListenFdEnv) == nullptr, "the variable is taken once");
        TcpStore client("127.0.0.1", port, false, 2000ms);
        client.set("k", bytes("v"));
        expect(server.get("k") == bytes("v"), "the inherited socket serves clients");
    } catch (const std::exception& e) {
        error = e.what();
    }
    expect(error.empty(), "a server on the inherited socket: " + error);
    expect(::fcntl(fd, F_GETFD) == -1, "the store closed the socket it adopted");

    // A descriptor listening on another port, or none at all, is not taken: the server binds.
    int otherPort = 0;
    const int other = listeningSocket(otherPort);
    ::setenv(kStoreListenFdEnv, std::to_string(other).c_str(), 1);
    {
        TcpStore server("127.0.0.1", 0, true, 2000ms);
        expect(server.port() != otherPort, "a socket on another port is not adopted");
    }
    expect(::fcntl(other, F_GETFD) != -1, "a socket not adopted stays open");
    ::close(other);
    ::setenv(kStoreListenFdEnv, "987", 1);
    {
        TcpStore server("127.0.0.1", 0, true, 2000ms);
        expect(server.port() > 0, "a closed descriptor: the server binds a port itself");
    }
}

} // namespace

int main()
{
    auto server = c10::make_intrusive<TcpStore>("127.0.0.1", 0, true, 5000ms);
    const int port = server->port();
    expect(port > 0, "port 0 picks a free port");
    auto client = c10::make_intrusive<TcpStore>("127.0.0.1", port, false, 5000ms);

    // The listening socket is bound to 127.0.0.1, not to every interface.
    const std::string other = errorOf([&] { TcpStore("127.0.0.2", port, false, 300ms); });
    expect(contains(other, "cannot connect to 127.0.0.2:" + std::to_string(port)),
        "no listener on 127.0.0.2: " + other);

    client->set("a", bytes("one"));
    expect(server->get("a") == bytes("one"), "set/get across clients");
    expect(server->add("n", 3) == 3 && client->add("n", -1) == 2, "add");
    expect(client->get("n") == bytes("2"), "add stores the decimal value");
    expect(client->check({"a", "n"}) && !client->check({"a", "missing"}), "check");
    expect(client->getNumKeys() == 2, "getNumKeys");
    expect(client->compareSet("a", bytes("one"), bytes("two")) == bytes("two"), "cas swaps");
    expect(client->compareSet("a", bytes("one"), bytes("three")) == bytes("two"),
        "cas keeps a changed value");
    expect(client->compareSet("c", {}, bytes("new")) == bytes("new"), "cas creates");
    expect(client->deleteKey("c") && !client->deleteKey("c"), "deleteKey");

    // A blocking get and wait released by another client's set.
    std::thread writer([&] {
        auto w = c10::make_intrusive<TcpStore>("127.0.0.1", port, false, 5000ms);
        std::this_thread::sleep_for(200ms);
        w->set("late", bytes("x"));
    });
    const auto t0 = std::chrono::steady_clock::now();
    expect(client->get("late") == bytes("x"), "get waits for the key");
    server->wait({"late", "a"});
    expect(std::chrono::steady_clock::now() - t0 >= 150ms, "get blocked until the set");
    writer.join();

    // Timeouts name the key and the address.
    const auto t1 = std::chrono::steady_clock::now();
    const std::string waited = errorOf([&] { client->wait({"never"}, 300ms); });
    expect(contains(waited, "timed out after 300 ms waiting for key(s) 'never'"),
        "wait timeout: " + waited);
    expect(std::chrono::steady_clock::now() - t1 < 3s, "wait timeout is bounded");
    client->setTimeout(200ms);
    expect(
        contains(errorOf([&] { client->get("never"); }), "waiting for key 'never'"), "get timeout");
    auto copy = client->clone();
    expect(copy->get("a") == bytes("two"), "clone reaches the same server");

    // Workers: all must count in within the timeout.
    {
        auto s = c10::make_intrusive<TcpStore>("127.0.0.1", 0, true, 300ms);
        const std::string e = errorOf([&] { s->waitForWorkers(2); });
        expect(contains(e, "1 of 2 ranks connected"), "missing worker: " + e);
    }
    // A rank that says who it is: the timeout names the ranks that did not come, and their
    // nodes when the run spans several.
    {
        auto s = c10::make_intrusive<TcpStore>("127.0.0.1", 0, true, 300ms);
        const std::string e = errorOf([&] { s->waitForWorkers(4, 0, 2); });
        expect(contains(e, "1 of 4 ranks connected")
                && contains(e, "missing: rank 1 (node 0), rank 2 (node 1), rank 3 (node 1)"),
            "missing ranks by node: " + e);
        auto one = c10::make_intrusive<TcpStore>("127.0.0.1", 0, true, 300ms);
        const std::string single = errorOf([&] { one->waitForWorkers(2, 0, 2); });
        expect(contains(single, "missing: rank 1") && !contains(single, "(node"),
            "one node: no node named: " + single);
    }

    // A busy port, and nobody serving.
    const std::string busy = errorOf([&] { TcpStore("127.0.0.1", port, true, 300ms); });
    expect(contains(busy, "port " + std::to_string(port) + " on 127.0.0.1 is in use"),
        "busy port: " + busy);
    int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len);
    const int freePort = ntohs(addr.sin_port);
    ::close(probe);
    const std::string refused = errorOf([&] { TcpStore("127.0.0.1", freePort, false, 300ms); });
    expect(contains(refused, "Connection refused"), "nobody serving: " + refused);

    // The server going away fails a client's request instead of hanging it.
    client.reset();
    copy.reset();
    auto orphan = c10::make_intrusive<TcpStore>("127.0.0.1", port, false, 5000ms);
    server.reset();
    expect(contains(errorOf([&] { orphan->get("a"); }), "lost the connection"), "server gone");

    inheritedSocket();

    if (failures == 0)
        std::printf("tst_tcp_store: all passed\n");
    return failures == 0 ? 0 : 1;
}
