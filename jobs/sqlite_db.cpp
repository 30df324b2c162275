// SQLite C API wrapper (see sqlite_db.h).
#include "jobs/sqlite_db.h"

#include <QUrl>
#include <sqlite3.h>

namespace shard::jobs {

SqliteDb::Statement::Statement(Statement&& other) noexcept
    : m_stmt(other.m_stmt)
    , m_db(other.m_db)
    , m_code(other.m_code)
{
    other.m_stmt = nullptr;
}

SqliteDb::Statement& SqliteDb::Statement::operator=(Statement&& other) noexcept
{
    if (this != &other) {
        if (m_stmt)
            sqlite3_finalize(m_stmt);
        m_stmt = other.m_stmt;
        m_db = other.m_db;
        m_code = other.m_code;
        other.m_stmt = nullptr;
    }
    return *this;
}

SqliteDb::Statement::~Statement()
{
    if (m_stmt)
        sqlite3_finalize(m_stmt);
}

SqliteDb::Statement& SqliteDb::Statement::bind(int index, int64_t value)
{
    sqlite3_bind_int64(m_stmt, index, value);
    return *this;
}

SqliteDb::Statement& SqliteDb::Statement::bind(int index, double value)
{
    sqlite3_bind_double(m_stmt, index, value);
    return *this;
}

SqliteDb::Statement& SqliteDb::Statement::bind(int index, const QString& value)
{
    const QByteArray utf8 = value.toUtf8();
    sqlite3_bind_text(m_stmt, index, utf8.constData(), utf8.size(), SQLITE_TRANSIENT);
    return *this;
}

SqliteDb::Statement& SqliteDb::Statement::bind(int index, const QByteArray& value)
{
    sqlite3_bind_text(m_stmt, index, value.constData(), value.size(), SQLITE_TRANSIENT);
    return *this;
}

SqliteDb::Statement& SqliteDb::Statement::bind(int index, std::optional<double> value)
{
    if (value)
        sqlite3_bind_double(m_stmt, index, *value);
    else
        sqlite3_bind_null(m_stmt, index);
    return *this;
}

SqliteDb::Statement& SqliteDb::Statement::bindNull(int index)
{
    sqlite3_bind_null(m_stmt, index);
    return *this;
}

bool SqliteDb::Statement::step()
{
    if (!m_stmt)
        return false;
    m_code = sqlite3_step(m_stmt);
    if (m_db)
        m_db->noteCode(m_code);
    return m_code == SQLITE_ROW;
}

int SqliteDb::Statement::exec()
{
    while (step()) { }
    return m_stmt ? m_code : SQLITE_MISUSE;
}

void SqliteDb::Statement::reset()
{
    if (m_stmt) {
        sqlite3_reset(m_stmt);
        sqlite3_clear_bindings(m_stmt);
    }
}

int64_t SqliteDb::Statement::int64(int col) const
{
    return sqlite3_column_int64(m_stmt, col);
}

double SqliteDb::Statement::real(int col) const
{
    return sqlite3_column_double(m_stmt, col);
}

std::optional<double> SqliteDb::Statement::optReal(int col) const
{
    if (sqlite3_column_type(m_stmt, col) == SQLITE_NULL)
        return std::nullopt;
    return sqlite3_column_double(m_stmt, col);
}

bool SqliteDb::Statement::isNull(int col) const
{
    return sqlite3_column_type(m_stmt, col) == SQLITE_NULL;
}

QString SqliteDb::Statement::text(int col) const
{
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, col));
    return p ? QString::fromUtf8(p, sqlite3_column_bytes(m_stmt, col)) : QString();
}

QByteArray SqliteDb::Statement::blob(int col) const
{
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, col));
    return p ? QByteArray(p, sqlite3_column_bytes(m_stmt, col)) : QByteArray();
}

SqliteDb::SqliteDb(SqliteDb&& other) noexcept
    : m_db(other.m_db)
    , m_lastCode(other.m_lastCode)
{
    other.m_db = nullptr;
}

SqliteDb& SqliteDb::operator=(SqliteDb&& other) noexcept
{
    if (this != &other) {
        close();
        m_db = other.m_db;
        m_lastCode = other.m_lastCode;
        other.m_db = nullptr;
    }
    return *this;
}

SqliteDb::~SqliteDb()
{
    close();
}

int SqliteDb::open(const QString& path, bool readOnly, int busyTimeoutMs, bool immutable)
{
    close();
    int flags = (readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        | SQLITE_OPEN_NOMUTEX;
    QByteArray p = path.toUtf8();
    if (immutable && readOnly) {
        flags |= SQLITE_OPEN_URI;
        p = "file:" + QUrl::toPercentEncoding(path, "/") + "?immutable=1";
    }
    m_lastCode = sqlite3_open_v2(p.constData(), &m_db, flags, nullptr);
    if (m_lastCode != SQLITE_OK)
        return m_lastCode;
    sqlite3_extended_result_codes(m_db, 0);
    sqlite3_busy_timeout(m_db, busyTimeoutMs);
    return SQLITE_OK;
}

bool SqliteDb::fileIsReadOnly() const
{
    return m_db && sqlite3_db_readonly(m_db, "main") == 1;
}

void SqliteDb::close()
{
    if (m_db) {
        sqlite3_close_v2(m_db);
        m_db = nullptr;
    }
}

int SqliteDb::exec(const char* sql)
{
    m_lastCode = sqlite3_exec(m_db, sql, nullptr, nullptr, nullptr);
    return m_lastCode;
}

SqliteDb::Statement SqliteDb::prepare(const char* sql)
{
    sqlite3_stmt* stmt = nullptr;
    m_lastCode = sqlite3_prepare_v2(m_db, sql, -1, &stmt, nullptr);
    if (m_lastCode != SQLITE_OK) {
        if (stmt)
            sqlite3_finalize(stmt);
        return Statement();
    }
    return Statement(stmt, this);
}

int64_t SqliteDb::lastInsertId() const
{
    return sqlite3_last_insert_rowid(m_db);
}

int SqliteDb::changes() const
{
    return sqlite3_changes(m_db);
}

QString SqliteDb::message() const
{
    if (!m_db)
        return QString::fromUtf8(sqlite3_errstr(m_lastCode));
    return QString::fromUtf8(sqlite3_errmsg(m_db));
}

} // namespace shard::jobs
