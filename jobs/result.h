// An expected-like result for the jobs library: a value, or a one-line error for the user.
// Qt code returns these instead of throwing (STYLE.md: errors are shown, never swallowed).
#pragma once

#include <optional>
#include <utility>

#include <QString>

namespace shard::jobs {

// The error half of a Result; `return fail("...")` from any function returning Result<T>.
struct Failure {
    QString message;
};

inline Failure fail(QString message)
{
    return Failure {std::move(message)};
}

template<typename T> class [[nodiscard]] Result {
public:
    Result(T value)
        : m_value(std::move(value))
    {
    }
    Result(Failure failure)
        : m_error(std::move(failure.message))
    {
    }

    bool ok() const { return m_value.has_value(); }
    explicit operator bool() const { return ok(); }
    const QString& error() const { return m_error; }

    const T& value() const& { return *m_value; }
    T& value() & { return *m_value; }
    T&& value() && { return std::move(*m_value); }
    const T* operator->() const { return &*m_value; }
    T* operator->() { return &*m_value; }
    const T& operator*() const& { return *m_value; }
    T& operator*() & { return *m_value; }
    T valueOr(T fallback) const { return m_value ? *m_value : std::move(fallback); }

private:
    std::optional<T> m_value;
    QString m_error;
};

template<> class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Failure failure)
        : m_failed(true)
        , m_error(std::move(failure.message))
    {
    }

    bool ok() const { return !m_failed; }
    explicit operator bool() const { return ok(); }
    const QString& error() const { return m_error; }

private:
    bool m_failed = false;
    QString m_error;
};

using Status = Result<void>;

} // namespace shard::jobs
