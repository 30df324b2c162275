// A value or a readable error message (Qt Creator's Utils::Result): UI code returns these instead
// of throwing, and shows the message to the user.
#pragma once

#include <optional>
#include <utility>

#include <QString>

namespace shard::widgets {

template<class T> class Result {
public:
    Result(T value)
        : m_value(std::move(value))
    {
    }
    static Result failure(QString message)
    {
        Result r;
        r.m_error = std::move(message);
        return r;
    }
    bool ok() const { return m_value.has_value(); }
    explicit operator bool() const { return ok(); }
    const T& value() const { return *m_value; }
    T& value() { return *m_value; }
    T take() { return std::move(*m_value); }
    const QString& error() const { return m_error; }

private:
    Result() = default;
    std::optional<T> m_value;
    QString m_error;
};

} // namespace shard::widgets
