// MessageBar: a coloured, selectable, word-wrapped label.
#include "widgets/message_bar.h"

namespace shard::widgets {

MessageBar::MessageBar(QWidget* parent)
    : QLabel(parent)
{
    setObjectName("messageBar");
    setWordWrap(true);
    setTextInteractionFlags(Qt::TextSelectableByMouse);
    setContentsMargins(8, 4, 8, 4);
    setVisible(false);
}

void MessageBar::showMessage(const QString& text, Kind kind)
{
    m_kind = kind;
    setText(text);
    setStyleSheet(kind == Kind::Error
            ? "QLabel#messageBar { background: #fde8e8; color: #8a1010; border: 1px solid "
              "#e8a0a0; border-radius: 3px; }"
            : "QLabel#messageBar { background: #e8f0fd; color: #10308a; border: 1px solid "
              "#a0b8e8; border-radius: 3px; }");
    setVisible(!text.isEmpty());
}

void MessageBar::clearMessage()
{
    setText({});
    setVisible(false);
}

} // namespace shard::widgets
