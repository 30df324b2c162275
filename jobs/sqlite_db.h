// A thin RAII wrapper over the SQLite C API: one connection, prepared statements with bound
// parameters only (never string-built SQL with values), and SQLite's error codes kept so the
// store can tell "locked" from "corrupt" from "read-only".
#pragma once

#include <cstdint>
#include <optional>

#include <QByteArray>
#include <QString>

#include "jobs/result.h"

struct sqlite3;
struct sqlite3_stmt;

namespace shard::jobs {

class SqliteDb {
public:
    class Statement {
    public:
        Statement() = default;
        Statement(Statement&& other) noexcept;
        Statement& operator=(Statement&& other) noexcept;
        Statement(const Statement&) = delete;
        Statement& operator=(const Statement&) = delete;
        ~Statement();

        bool valid() const { return m_stmt != nullptr; }
        // Parameters are 1-based, as in SQLite.
        Statement& bind(int index, int64_t value);
        Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
        Statement& bind(int index, long long value)
        {
            return bind(index, static_cast<int64_t>(value));
        }
        Statement& bind(int index, double value);
        Statement& bind(int index, const QString& value);
        Statement& bind(int index, const QByteArray& value);
        Statement& bind(int index, std::optional<double> value);
        Statement& bindNull(int index);

        // true: a row is ready; false: done. Errors go to the connection (SqliteDb::lastCode).
        bool step();
        // Runs to completion; returns SQLite's result code (SQLITE_DONE on success).
        int exec();
        void reset();

        int64_t int64(int col) const;
        double real(int col) const;
        std::optional<double> optReal(int col) const;
        bool isNull(int col) const;
        QString text(int col) const;
        QByteArray blob(int col) const;

        int lastCode() const { return m_code; }

    private:
        friend class SqliteDb;
        Statement(sqlite3_stmt* stmt, SqliteDb* db)
            : m_stmt(stmt)
            , m_db(db)
        {
        }
        sqlite3_stmt* m_stmt = nullptr;
        SqliteDb* m_db = nullptr;
        int m_code = 0;
    };

    SqliteDb() = default;
    SqliteDb(SqliteDb&& other) noexcept;
    SqliteDb& operator=(SqliteDb&& other) noexcept;
    SqliteDb(const SqliteDb&) = delete;
    SqliteDb& operator=(const SqliteDb&) = delete;
    ~SqliteDb();

    // Returns SQLite's primary result code (SQLITE_OK on success); message() says more.
    // `immutable`: read-only media where not even the WAL index can be created (read-only only).
    int open(const QString& path, bool readOnly, int busyTimeoutMs, bool immutable = false);
    bool fileIsReadOnly() const; // SQLite opened the file read-only (no write permission)
    void close();
    bool isOpen() const { return m_db != nullptr; }

    // Runs one or more statements without parameters (schema, pragmas). Returns the code.
    int exec(const char* sql);
    Statement prepare(const char* sql);
    int64_t lastInsertId() const;
    int changes() const;

    int lastCode() const { return m_lastCode; }
    QString message() const; // SQLite's text for the last error

private:
    friend class Statement;
    void noteCode(int code) { m_lastCode = code; }
    sqlite3* m_db = nullptr;
    int m_lastCode = 0;
};

} // namespace shard::jobs
