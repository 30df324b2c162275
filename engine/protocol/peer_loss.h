// Whether an error says another rank's process or connection is gone (Gloo's words): the
// trainer leaves such a failure to the launcher, and the launcher takes a rank that exited with
// it for a consequence of another rank's failure, not the cause.
#pragma once

#include <string>

namespace shard::protocol {

inline bool lostPeerError(const std::string& message)
{
    for (const char* words : {"Connection reset by peer", "Connection closed by peer",
             "Broken pipe", "Connection refused", "Socket closed"})
        if (message.find(words) != std::string::npos)
            return true;
    return false;
}

} // namespace shard::protocol
