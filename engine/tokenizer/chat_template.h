// Chat templates rendered natively (no Jinja): Llama 3, ChatML (Qwen 2/2.5/3) and Llama 2
// [INST]. The template is picked from tokenizer_config.json's chat_template, else from the
// tokenizer's special tokens and class, else named explicitly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shard::tokenizer {

class Tokenizer;

enum class ChatTemplateKind { Llama3, ChatML, Llama2 };

struct ChatMessage {
    std::string role; // system, user or assistant
    std::string content;
};

// A piece of rendered chat text; trainable pieces are the assistant answers and their
// end-of-turn marker (the tokens a fine-tune puts loss on).
struct ChatSegment {
    std::string text;
    bool trainable = false;
};

// "llama3", "chatml" (alias "qwen"), "llama2"; throws naming the accepted names.
ChatTemplateKind parseChatTemplateName(std::string_view name);
std::string chatTemplateName(ChatTemplateKind kind);

// The family a Jinja chat template text belongs to (by its markers), or nullopt.
std::optional<ChatTemplateKind> chatTemplateFromText(std::string_view templateText);
// What --chat-template names: a built-in (llama3, chatml, qwen, llama2) or a file holding a
// template of one of them (a .jinja file, or JSON such as tokenizer_config.json with
// "chat_template"). Throws naming the option and the fix.
ChatTemplateKind chatTemplateFromOption(std::string_view option);

// The family as people name it: "Llama 3", "ChatML", "Llama 2 [INST]".
std::string chatTemplateTitle(ChatTemplateKind kind);

// Which template a chat is rendered with, and where that came from, in words such as "the
// tokenizer's chat_template" or "guessed from the tokenizer's special tokens <|im_start|> and
// <|im_end|>" (the Playground and `shard-worker generate` say it).
struct ChatTemplateChoice {
    ChatTemplateKind kind;
    std::string source;
};

// `override` (a chatTemplateFromOption value, may be empty) wins; otherwise detection from the
// tokenizer. Throws when no template is recognised, naming the fix (--chat-template ...).
ChatTemplateChoice chooseChatTemplate(const Tokenizer& tokenizer, std::string_view override = {});
ChatTemplateKind detectChatTemplate(const Tokenizer& tokenizer, std::string_view override = {});

// Renders messages into segments. Special-token strings (e.g. "<|eot_id|>") appear as text and
// are matched as added tokens when encoded. With addGenerationPrompt the header of an assistant
// turn is appended (for generating an answer). Throws on an unknown role or an empty list.
std::vector<ChatSegment> renderChat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
    const Tokenizer& tokenizer, bool addGenerationPrompt = false);

} // namespace shard::tokenizer
