// The TensorBoard event reader against files other tools wrote (../shared/fixtures: PyTorch
// Lightning, torch's SummaryWriter, Keras in TFX, torchtitan, Hugging Face Trainer; the scalars
// beside each were decoded by an independent decoder), a file that grows record by record with
// records split across writes, and bad input: a truncated record, a failed data CRC, a length of
// 2^63, a broken length CRC, a file that is not an event file, an empty file, deep nesting.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tbio/crc32c.h"
#include "tbio/event_reader.h"
#include "tbio/tfrecord.h"

namespace fs = std::filesystem;
using namespace shard::tbio;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what)
{
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

void spit(const fs::path& p, const std::string& bytes, bool append = false)
{
    std::ofstream out(p, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
    out << bytes;
}

std::string errorOf(const std::function<void()>& fn)
{
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part)
{
    return s.find(part) != std::string::npos;
}

// Every point of every tag as the reader gives it, grouped by tag in file order.
std::map<std::string, std::vector<ScalarPoint>> byTag(const std::vector<ScalarPoint>& points)
{
    std::map<std::string, std::vector<ScalarPoint>> tags;
    for (const auto& p : points)
        tags[p.tag].push_back(p);
    return tags;
}

void fixtures(const fs::path& root)
{
    int files = 0;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
        const std::string name = entry.path().filename().string();
        if (!entry.is_regular_file() || !isEventFileName(name)
            || entry.path().extension() == ".json")
            continue;
        const fs::path expectedPath = entry.path().string() + ".scalars.json";
        if (!fs::exists(expectedPath))
            continue;
        ++files;
        const auto expected = nlohmann::json::parse(slurp(expectedPath));
        EventFileScan scan;
        const std::string error = errorOf([&] { scan = readEventFile(entry.path().string()); });
        const std::string what = entry.path().lexically_relative(root).string();
        expect(error.empty(), what + ": " + error);
        expect(scan.error.empty() && scan.crcFailures == 0 && !scan.truncatedTail,
            what + ": read whole (" + scan.error + ")");
        expect(scan.fileVersion.rfind("brain.Event:", 0) == 0, what + ": file version");
        expect(scan.endOffset == static_cast<int64_t>(fs::file_size(entry.path())),
            what + ": read to the end");
        const auto got = byTag(scan.scalars);
        expect(got.size() == expected.size(),
            what + ": " + std::to_string(got.size()) + " tags, expected "
                + std::to_string(expected.size()));
        size_t points = 0;
        for (const auto& [tag, list] : expected.items()) {
            auto it = got.find(tag);
            if (it == got.end()) {
                expect(false, what + ": tag " + tag + " missing");
                continue;
            }
            expect(it->second.size() == list.size(),
                what + ": " + tag + " has " + std::to_string(it->second.size()) + " points, "
                    + std::to_string(list.size()) + " expected");
            for (size_t i = 0; i < std::min(list.size(), it->second.size()); ++i) {
                const auto& p = it->second[i];
                const auto& e = list[i];
                const double value = e[2].is_null() ? NAN : e[2].get<double>();
                const bool same = p.step == e[0].get<int64_t>() && p.wallTime == e[1].get<double>()
                    && (p.value == value || (std::isnan(p.value) && std::isnan(value)));
                if (!same) {
                    expect(false,
                        what + ": " + tag + " point " + std::to_string(i) + " is ("
                            + std::to_string(p.step) + ", " + std::to_string(p.wallTime) + ", "
                            + std::to_string(p.value) + "), expected " + e.dump());
                    break;
                }
            }
            points += list.size();
        }
        std::printf("%-110s %3zu tags %5zu points, skipped:", what.c_str(), got.size(), points);
        for (const auto& [kind, n] : scan.skipped)
            std::printf(" %s %lld", kind.c_str(), static_cast<long long>(n));
        std::printf("\n");
    }
    expect(files >= 8,
        "the fixtures hold at least 8 event files with decoded scalars, found "
            + std::to_string(files));
}

// A file that grows: the bytes of a real event file appended in uneven pieces (records split
// across writes), read from the last end offset after each piece, give every point once.
void liveFollow(const fs::path& source, const fs::path& dir)
{
    const std::string bytes = slurp(source);
    const EventFileScan whole = readEventFile(source.string());
    const fs::path file = dir / "events.out.tfevents.1.growing";
    spit(file, "");
    std::vector<ScalarPoint> seen;
    int64_t offset = 0;
    int truncatedReads = 0;
    size_t at = 0, piece = 7;
    while (at < bytes.size()) {
        const size_t n = std::min(piece, bytes.size() - at);
        spit(file, bytes.substr(at, n), true);
        at += n;
        piece = piece * 3 % 1013 + 5;
        const EventFileScan scan = readEventFile(file.string(), offset);
        expect(scan.error.empty(), "growing file: " + scan.error);
        truncatedReads += scan.truncatedTail ? 1 : 0;
        seen.insert(seen.end(), scan.scalars.begin(), scan.scalars.end());
        offset = scan.endOffset;
    }
    expect(truncatedReads > 0, "some reads ended in a record still being written");
    expect(offset == static_cast<int64_t>(bytes.size()), "the growing file is read to its end");
    bool same = seen.size() == whole.scalars.size();
    for (size_t i = 0; same && i < seen.size(); ++i)
        same = seen[i].tag == whole.scalars[i].tag && seen[i].step == whole.scalars[i].step
            && seen[i].value == whole.scalars[i].value;
    expect(same,
        "read while growing: " + std::to_string(seen.size()) + " points, in one read "
            + std::to_string(whole.scalars.size()));
}

std::string u64le(uint64_t v)
{
    std::string s;
    for (int i = 0; i < 8; ++i)
        s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return s;
}

std::string u32le(uint32_t v)
{
    std::string s;
    for (int i = 0; i < 4; ++i)
        s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return s;
}

// Event{file_version: "brain.Event:2"} and Event{step, summary{value{tag, simple_value}}}, in
// protobuf's wire format by hand (independently of the reader's generated code).
std::string versionEvent()
{
    const std::string v = "brain.Event:2";
    return std::string("\x1a", 1) + static_cast<char>(v.size()) + v;
}

std::string scalarEvent(int step, const std::string& tag, float value)
{
    std::string val = std::string("\x0a", 1) + static_cast<char>(tag.size()) + tag;
    val += '\x15';
    val.append(reinterpret_cast<const char*>(&value), 4);
    const std::string summary = std::string("\x0a", 1) + static_cast<char>(val.size()) + val;
    std::string e = "\x10";
    e += static_cast<char>(step); // steps below 128: one varint byte
    e += '\x2a';
    e += static_cast<char>(summary.size());
    return e + summary;
}

void badInput(const fs::path& dir)
{
    // The standard check value of CRC-32C.
    expect(crc32c("123456789", 9) == 0xE3069283u, "crc32c check value");

    const std::string good = frameRecord(versionEvent()) + frameRecord(scalarEvent(1, "loss", 2.5f))
        + frameRecord(scalarEvent(2, "loss", 2.0f)) + frameRecord(scalarEvent(3, "loss", 1.5f));
    const fs::path ok = dir / "events.out.tfevents.2.ok";
    spit(ok, good);
    auto scan = readEventFile(ok.string());
    expect(scan.scalars.size() == 3 && scan.scalars[2].value == 1.5 && scan.scalars[2].step == 3,
        "hand-written events read back");

    // A record cut short: waited for, not an error.
    const fs::path cut = dir / "events.out.tfevents.3.cut";
    spit(cut, good.substr(0, good.size() - 5));
    scan = readEventFile(cut.string());
    expect(scan.error.empty() && scan.truncatedTail && scan.scalars.size() == 2,
        "a truncated last record is waited for");

    // A data CRC that fails: that record is skipped and counted, the rest is read.
    std::string flipped = good;
    const size_t second = frameRecord(versionEvent()).size();
    flipped[second + 12 + 3] ^= 0x40;
    const fs::path crc = dir / "events.out.tfevents.4.crc";
    spit(crc, flipped);
    scan = readEventFile(crc.string());
    expect(scan.crcFailures == 1 && scan.scalars.size() == 2 && scan.error.empty(),
        "a failed data CRC skips one record");

    // A length of 2^63 with a valid length CRC: refused, memory untouched, what came before kept.
    std::string huge = u64le(uint64_t(1) << 63);
    huge += u32le(maskedCrc32c(huge.data(), 8));
    const fs::path hostile = dir / "events.out.tfevents.5.hostile";
    spit(hostile, frameRecord(versionEvent()) + frameRecord(scalarEvent(1, "loss", 1.0f)) + huge);
    scan = readEventFile(hostile.string());
    expect(scan.scalars.size() == 1 && contains(scan.error, "claims 9223372036854775808 bytes")
            && contains(scan.error, hostile.string()),
        "a 2^63 length: " + scan.error);

    // A broken length CRC after good records: the rest cannot be framed.
    std::string broken = good;
    broken[second + 9] ^= 0x01;
    const fs::path frame = dir / "events.out.tfevents.6.frame";
    spit(frame, broken);
    scan = readEventFile(frame.string());
    expect(scan.scalars.empty() && contains(scan.error, "fails its CRC"),
        "a broken length CRC: " + scan.error);

    // Not an event file: refused with its name.
    const fs::path json = dir / "events.out.tfevents.7.json";
    spit(json, "{\"loss\": 1.0, \"step\": 1, \"more\": \"text to fill a header\"}\n");
    std::string e = errorOf([&] { readEventFile(json.string()); });
    expect(contains(e, json.string() + " is not a TensorBoard event file"), "not events: " + e);
    const fs::path other = dir / "events.out.tfevents.8.record";
    spit(other, frameRecord("not an event at all"));
    e = errorOf([&] { readEventFile(other.string()); });
    expect(contains(e, "is not a TensorBoard event file"), "a TFRecord of something else: " + e);
    e = errorOf([&] { readEventFile((dir / "absent").string()); });
    expect(contains(e, "cannot open"), "a missing file: " + e);

    // Empty: nothing yet, no error.
    const fs::path empty = dir / "events.out.tfevents.9.empty";
    spit(empty, "");
    scan = readEventFile(empty.string());
    expect(scan.records == 0 && scan.error.empty() && !scan.truncatedTail, "an empty file");

    // Absurd nesting: a million start-group tags in one record is undecodable, not a crash.
    const fs::path deep = dir / "events.out.tfevents.10.deep";
    spit(deep,
        frameRecord(versionEvent()) + frameRecord(std::string(1000000, '\x0b'))
            + frameRecord(scalarEvent(4, "loss", 0.5f)));
    scan = readEventFile(deep.string());
    expect(scan.skipped["undecodable"] == 1 && scan.scalars.size() == 1,
        "deep nesting is skipped as undecodable");

    // Half and bfloat16 bit patterns.
    expect(halfToFloat(0x3C00) == 1.0f && halfToFloat(0xC000) == -2.0f
            && halfToFloat(0x0001) == std::ldexp(1.0f, -24),
        "half to float");
    expect(bfloat16ToFloat(0x3F80) == 1.0f, "bfloat16 to float");
}

} // namespace

int main()
{
    const fs::path dir = fs::temp_directory_path() / ("shard-tbio-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    badInput(dir);
    const fs::path fixtureRoot = fs::path(SHARD_SOURCE_DIR) / ".." / "shared" / "fixtures";
    if (fs::is_directory(fixtureRoot)) {
        fixtures(fixtureRoot.lexically_normal());
        const fs::path lightning = fixtureRoot
            / "phlippe__saved_models/tutorial17/tensorboards/classification/ResNet/"
              "events.out.tfevents.ResNet";
        liveFollow(lightning, dir);
    } else {
        std::printf("SKIP fixtures: %s is absent (files other tools wrote)\n",
            fixtureRoot.string().c_str());
    }
    fs::remove_all(dir);
    if (failures == 0)
        std::printf("tst_event_reader: all passed\n");
    return failures == 0 ? 0 : 1;
}
