// A one-line message strip for a page: errors from the layers below are shown here in words,
// never dropped. Hidden while empty.
#pragma once

#include <QLabel>

namespace shard::widgets {

class MessageBar : public QLabel {
    Q_OBJECT
public:
    enum class Kind { Info, Error };
    explicit MessageBar(QWidget* parent = nullptr);
    void showMessage(const QString& text, Kind kind = Kind::Error);
    void clearMessage();
    Kind kind() const { return m_kind; }

private:
    Kind m_kind = Kind::Info;
};

} // namespace shard::widgets
