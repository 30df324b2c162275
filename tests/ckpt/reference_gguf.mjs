// Reference runner for tst_gguf_export: llama.cpp itself (node-llama-cpp's prebuilt CPU build,
// fetched by scripts/fetch-fixtures.sh) loads a GGUF the engine exported and reports
//   - the ids llama.cpp's tokenizer gives each text (no BOS/EOS added), and
//   - a greedy continuation of N tokens from the given prompt ids (ids, not text, so the
//     generation is compared apart from the tokenizer), EOS included, nothing stops early;
//   - for "score_ids", the mean negative log-likelihood llama.cpp gives each token after the
//     first, from its logits (log p = logit - max logit - log sum exp(logit - max)): the
//     perplexity of a text is exp of it.
// usage: node reference_gguf.mjs <npm-dir> <model.gguf> <inputs.json>
//   inputs.json: {"texts": [...], "prompt_ids": [...], "new_tokens": N, "score_ids": [...]}
// prints one JSON line:
//   {"tokens": [[...], ...], "continuation": [...], "nll": x, "scored": n, "metadata": {...}}
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [npmDir, modelPath, inputsPath] = process.argv.slice(2);
const nlc = await import(pathToFileURL(path.join(npmDir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')));
const inputs = JSON.parse(fs.readFileSync(inputsPath, 'utf8'));
const llama = await nlc.getLlama({ gpu: false, build: 'never', progressLogs: false,
    logLevel: nlc.LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath });
const tokens = (inputs.texts || []).map((t) => Array.from(model.tokenize(t, false)));
let continuation = [];
if (inputs.prompt_ids && inputs.new_tokens > 0) {
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    const sequence = context.getSequence();
    const it = sequence.evaluate(inputs.prompt_ids, { temperature: 0, yieldEogToken: true });
    for await (const token of it) {
        continuation.push(token);
        if (continuation.length >= inputs.new_tokens) break;
    }
    await context.dispose();
}
let nll = null, scored = 0;
if (inputs.score_ids && inputs.score_ids.length > 1) {
    const ids = inputs.score_ids;
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    const sequence = context.getSequence();
    const input = ids.map((id, i) => i + 1 < ids.length
        ? [id, { generateNext: { logits: { filter: { tokens: [ids[i + 1]], includeMax: true } },
            totalLogitWeight: true } }]
        : id);
    const out = await sequence.controlledEvaluate(input);
    let sum = 0;
    for (let i = 0; i + 1 < ids.length; ++i) {
        const next = out[i].next;
        const max = next.logits.values().next().value;
        sum -= next.logits.get(ids[i + 1]) - max - Math.log(next.totalLogitWeight);
        ++scored;
    }
    nll = sum / scored;
    await context.dispose();
}
const metadata = {
    architecture: model.fileInfo.metadata.general.architecture,
    name: model.fileInfo.metadata.general.name,
    tensors: model.fileInfo.tensorInfo ? model.fileInfo.tensorInfo.length : null,
    bos: model.tokens.bos, eos: model.tokens.eos,
};
process.stdout.write(JSON.stringify({ tokens, continuation, nll, scored, metadata }) + '\n');
await model.dispose();
process.exit(0);
