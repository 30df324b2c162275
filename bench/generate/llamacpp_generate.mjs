// llama.cpp's side of bench/generate/vs_llamacpp.sh: node-llama-cpp's prebuilt CPU llama.cpp
// loads a GGUF, evaluates the given prompt ids and generates N tokens greedily (EOS does not
// stop it), on T threads. Prefill = prompt tokens over the time to the first generated token;
// decode = the tokens after the first over the time they took (one step each).
// usage: node llamacpp_generate.mjs <npm-dir> <model.gguf> <prompt-ids.json> <new> <threads>
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [npmDir, modelPath, idsPath, newArg, threadsArg] = process.argv.slice(2);
const nlc = await import(pathToFileURL(path.join(npmDir, 'node_modules', 'node-llama-cpp', 'dist', 'index.js')));
const ids = JSON.parse(fs.readFileSync(idsPath, 'utf8'));
const newTokens = parseInt(newArg, 10);
const threads = parseInt(threadsArg, 10);
const llama = await nlc.getLlama({ gpu: false, build: 'never', progressLogs: false,
    logLevel: nlc.LlamaLogLevel.error, maxThreads: threads });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: ids.length + newTokens + 16, threads,
    batchSize: Math.max(512, ids.length) });
const sequence = context.getSequence();
const t0 = process.hrtime.bigint();
let first = 0n, last = 0n, n = 0;
for await (const token of sequence.evaluate(ids, { temperature: 0, yieldEogToken: true })) {
    const now = process.hrtime.bigint();
    if (n === 0) first = now;
    last = now;
    if (++n >= newTokens) break;
}
const sec = (a, b) => Number(b - a) / 1e9;
process.stdout.write(JSON.stringify({ impl: 'llama.cpp', prompt_tokens: ids.length, tokens: n,
    prefill_tokens_per_sec: ids.length / sec(t0, first),
    decode_tokens_per_sec: (n - 1) / sec(first, last) }) + '\n');
await context.dispose();
await model.dispose();
process.exit(0);
