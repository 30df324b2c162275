// Hugging Face's GGUF reader (@huggingface/gguf, fetched by scripts/fetch-fixtures.sh) reads an
// exported file back: a second, independent parser of the header for tst_gguf_export.
// usage: node read_gguf_metadata.mjs <npm-dir> <model.gguf>
// prints one JSON line: {"metadata": {key: value, arrays as {"length": n}}, "tensors":
//   [{"name", "shape", "dtype"}, ...]} (shape innermost first, as GGUF stores it)
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [npmDir, modelPath] = process.argv.slice(2);
const { gguf } = await import(pathToFileURL(
    path.join(npmDir, 'node_modules', '@huggingface', 'gguf', 'dist', 'index.mjs')));
const { metadata, tensorInfos } = await gguf(path.resolve(modelPath), { allowLocalFile: true });
const md = {};
for (const [key, value] of Object.entries(metadata))
    md[key] = Array.isArray(value) ? { length: value.length }
        : typeof value === 'bigint' ? Number(value) : value;
const tensors = tensorInfos.map((t) => ({
    name: t.name, shape: t.shape.map((d) => Number(d)), dtype: t.dtype }));
process.stdout.write(JSON.stringify({ metadata: md, tensors }) + '\n');
