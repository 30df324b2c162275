// Native renderings of the Llama 3, ChatML and Llama 2 chat templates, split into prompt and
// answer segments for loss masking.
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace shard::tokenizer {

namespace {

std::string trim(const std::string& s)
{
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos)
        return {};
    const size_t e = s.find_last_not_of(ws);
    return s.substr(b, e - b + 1);
}

void checkRoles(const std::vector<ChatMessage>& messages)
{
    if (messages.empty())
        throw std::runtime_error("chat: \"messages\" is empty");
    for (const auto& m : messages)
        if (m.role != "system" && m.role != "user" && m.role != "assistant")
            throw std::runtime_error(
                "chat: unknown role '" + m.role + "' (expected system, user or assistant)");
}

std::vector<ChatSegment> renderLlama3(
    const std::vector<ChatMessage>& messages, const Tokenizer& tok, bool genPrompt)
{
    std::vector<ChatSegment> out;
    std::string prompt = tok.bosToken().empty() ? "<|begin_of_text|>" : tok.bosToken();
    for (const auto& m : messages) {
        prompt += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        if (m.role == "assistant") {
            out.push_back({prompt, false});
            prompt.clear();
            out.push_back({trim(m.content) + "<|eot_id|>", true});
        } else {
            prompt += trim(m.content) + "<|eot_id|>";
        }
    }
    if (genPrompt)
        prompt += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    if (!prompt.empty())
        out.push_back({prompt, false});
    return out;
}

std::vector<ChatSegment> renderChatML(
    const std::vector<ChatMessage>& messages, const Tokenizer& tok, bool genPrompt)
{
    const std::string& tmpl = tok.chatTemplate();
    const bool thinking = tmpl.find("<think>") != std::string::npos;
    const std::string kQwenDefaultSystem
        = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    std::vector<ChatSegment> out;
    std::string prompt;
    if (messages.front().role != "system" && tmpl.find(kQwenDefaultSystem) != std::string::npos)
        prompt += "<|im_start|>system\n" + kQwenDefaultSystem + "<|im_end|>\n";
    size_t lastUser = 0;
    for (size_t i = 0; i < messages.size(); ++i)
        if (messages[i].role == "user")
            lastUser = i;
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        prompt += "<|im_start|>" + m.role + "\n";
        if (m.role == "assistant") {
            // Qwen 3 writes an empty think block into the final answer after the last query.
            if (thinking && i > lastUser && i + 1 == messages.size())
                prompt += "<think>\n\n</think>\n\n";
            out.push_back({prompt, false});
            prompt.clear();
            out.push_back({m.content + "<|im_end|>", true});
            prompt += "\n";
        } else {
            prompt += m.content + "<|im_end|>\n";
        }
    }
    if (genPrompt)
        prompt += "<|im_start|>assistant\n";
    if (!prompt.empty())
        out.push_back({prompt, false});
    return out;
}

std::vector<ChatSegment> renderLlama2(
    const std::vector<ChatMessage>& messages, const Tokenizer& tok, bool genPrompt)
{
    const std::string bos = tok.bosToken().empty() ? "<s>" : tok.bosToken();
    const std::string eos = tok.eosToken().empty() ? "</s>" : tok.eosToken();
    std::vector<ChatSegment> out;
    std::string system;
    size_t first = 0;
    if (messages.front().role == "system") {
        system = "<<SYS>>\n" + trim(messages.front().content) + "\n<</SYS>>\n\n";
        first = 1;
    }
    std::string prompt;
    bool sawUser = false;
    for (size_t i = first; i < messages.size(); ++i) {
        const auto& m = messages[i];
        if (m.role == "system")
            throw std::runtime_error("chat: llama2 template allows a system message only first");
        if (m.role == "user") {
            prompt += bos + "[INST] " + (sawUser ? "" : system) + trim(m.content) + " [/INST]";
            sawUser = true;
        } else {
            out.push_back({prompt, false});
            prompt.clear();
            out.push_back({" " + trim(m.content) + " " + eos, true});
        }
    }
    (void)genPrompt; // the prompt already ends with [/INST]
    if (!prompt.empty())
        out.push_back({prompt, false});
    return out;
}

} // namespace

ChatTemplateKind parseChatTemplateName(std::string_view name)
{
    if (name == "llama3")
        return ChatTemplateKind::Llama3;
    if (name == "chatml" || name == "qwen")
        return ChatTemplateKind::ChatML;
    if (name == "llama2")
        return ChatTemplateKind::Llama2;
    throw std::runtime_error(
        "unknown chat template '" + std::string(name) + "' (use llama3, chatml or llama2)");
}

std::optional<ChatTemplateKind> chatTemplateFromText(std::string_view t)
{
    if (t.find("<|start_header_id|>") != std::string::npos)
        return ChatTemplateKind::Llama3;
    if (t.find("<|im_start|>") != std::string::npos)
        return ChatTemplateKind::ChatML;
    if (t.find("[INST]") != std::string::npos && t.find("<<SYS>>") != std::string::npos)
        return ChatTemplateKind::Llama2;
    return std::nullopt;
}

ChatTemplateKind chatTemplateFromOption(std::string_view option)
{
    const std::string value(option);
    if (value == "llama3" || value == "chatml" || value == "qwen" || value == "llama2")
        return parseChatTemplateName(value);
    std::ifstream in(value, std::ios::binary);
    if (!in || std::filesystem::is_directory(value))
        throw std::runtime_error("unknown chat template '" + value
            + "': give a built-in (llama3, chatml, qwen, llama2) or a readable template file "
              "(--chat-template FILE)");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // tokenizer_config.json (or any JSON holding "chat_template"): the template inside it.
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("chat_template")) {
        const auto& c = j["chat_template"];
        if (c.is_string()) {
            text = c.get<std::string>();
        } else if (c.is_array()) {
            text.clear();
            for (const auto& named : c)
                if (named.is_object() && named.value("name", "") == "default")
                    text = named.value("template", "");
        }
    }
    if (auto kind = chatTemplateFromText(text))
        return *kind;
    throw std::runtime_error("--chat-template " + value
        + ": the template is not one of the built-in families (Llama 3 <|start_header_id|>, "
          "ChatML <|im_start|>, Llama 2 [INST] <<SYS>>); the engine renders only those: pass "
          "llama3, chatml or llama2 for the closest one");
}

std::string chatTemplateName(ChatTemplateKind kind)
{
    switch (kind) {
    case ChatTemplateKind::Llama3:
        return "llama3";
    case ChatTemplateKind::ChatML:
        return "chatml";
    case ChatTemplateKind::Llama2:
        return "llama2";
    }
    return "?";
}

std::string chatTemplateTitle(ChatTemplateKind kind)
{
    switch (kind) {
    case ChatTemplateKind::Llama3:
        return "Llama 3";
    case ChatTemplateKind::ChatML:
        return "ChatML";
    case ChatTemplateKind::Llama2:
        return "Llama 2 [INST]";
    }
    return "?";
}

ChatTemplateChoice chooseChatTemplate(const Tokenizer& tok, std::string_view override)
{
    using K = ChatTemplateKind;
    if (!override.empty())
        return {chatTemplateFromOption(override), "--chat-template " + std::string(override)};
    const std::string& t = tok.chatTemplate();
    if (!t.empty()) {
        if (auto kind = chatTemplateFromText(t))
            return {*kind, "the tokenizer's chat_template"};
        throw std::runtime_error(
            "tokenizer_config.json: chat_template is not one of the known templates (Llama 3, "
            "ChatML, Llama 2); pass --chat-template llama3|chatml|llama2 (or a template file of "
            "one of them) to choose one");
    }
    const std::string none = "the tokenizer has no chat_template; guessed from ";
    if (tok.tokenToId("<|start_header_id|>") >= 0 && tok.tokenToId("<|eot_id|>") >= 0)
        return {K::Llama3, none + "its special tokens <|start_header_id|> and <|eot_id|>"};
    if (tok.tokenToId("<|im_start|>") >= 0 && tok.tokenToId("<|im_end|>") >= 0)
        return {K::ChatML, none + "its special tokens <|im_start|> and <|im_end|>"};
    if (tok.tokenizerClass() == "LlamaTokenizer" || tok.tokenizerClass() == "LlamaTokenizerFast")
        return {K::Llama2, none + "its class " + tok.tokenizerClass()};
    // Last, the model type from config.json: Qwen models speak ChatML; Llama models with a
    // SentencePiece vocabulary (BOS "<s>") are Llama 2.
    const std::string& type = tok.modelType();
    if (type.rfind("qwen", 0) == 0)
        return {K::ChatML, none + "the model type " + type};
    if (type == "llama" && tok.bosToken() == "<s>")
        return {K::Llama2, none + "the model type llama with BOS <s>"};
    throw std::runtime_error("tokenizer has no chat_template and its model type ('"
        + (tok.modelType().empty() ? std::string("unknown") : tok.modelType())
        + "') is not recognised; pass "
          "--chat-template llama3|chatml|llama2 (or a template file of one of them) to choose "
          "one");
}

ChatTemplateKind detectChatTemplate(const Tokenizer& tok, std::string_view override)
{
    return chooseChatTemplate(tok, override).kind;
}

std::vector<ChatSegment> renderChat(ChatTemplateKind kind, const std::vector<ChatMessage>& messages,
    const Tokenizer& tokenizer, bool addGenerationPrompt)
{
    checkRoles(messages);
    switch (kind) {
    case ChatTemplateKind::Llama3:
        return renderLlama3(messages, tokenizer, addGenerationPrompt);
    case ChatTemplateKind::ChatML:
        return renderChatML(messages, tokenizer, addGenerationPrompt);
    case ChatTemplateKind::Llama2:
        return renderLlama2(messages, tokenizer, addGenerationPrompt);
    }
    return {};
}

} // namespace shard::tokenizer
