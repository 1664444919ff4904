/**
 * The planted synthetic model (`safekeep make-model planted`): a tiny Llama-format checkpoint whose weights put a
 * KNOWN refusal direction r and a KNOWN schema effect into the residual stream, so every analysis has a computable
 * true answer. It is synthetic: it understands nothing; it reacts to a lexicon.
 *
 * Construction (d = 64, L = 4 blocks, word-level vocabulary). Pick a seeded orthonormal basis Q of R^d and name
 *   r = Q0 (refusal direction), u = Q1 (lexical "harm feature"), f = Q2 (constant "bias" channel), Q3..Q(d-1) noise.
 * Every token embedding has unit norm:  E[w] = a_w·u + β·f + sqrt(1 − a_w² − β²)·n_w,  n_w a random unit vector in
 * span(Q3..). a_w = +A for harm-lexicon words, −S for JSON-schema syntax tokens, a small seeded N(0, σ²) otherwise.
 * - block 0 (→ hidden[1]): uniform causal attention (q = k = 0) copies the running mean of a noise coordinate (Q3)
 *   into Q4: content-dependent, orthogonal to r.
 * - block 1 (→ hidden[2]): uniform causal attention copies the running mean of u·x_norm/√d into r with gain G:
 *   hidden[2]_t = hidden[1]_t + G·mean_{s≤t}(a_s/√(1 + c_s² + dε))·r   (`predictedRefusalScore` gives it exactly).
 * - blocks 2.. : identity (o_proj = down_proj = 0), so hidden[l]·r is the same for every l ≥ 2, and steering
 *   hidden[l] by −α·r moves every later r-projection by exactly −α.
 * - lm_head: row "sorry" = K·r, row "{" = K·(τ/β)·f. After the final norm both logits share one scale, so the
 *   first token is "sorry" iff hidden[L]·r > τ (refusal), else "{" (an invalid tool call). A short chain written
 *   through the n_w directions continues "sorry" into "sorry , i cannot help with that . <|end|>".
 *
 * True answers: the harmful-minus-benign mean difference at the last prompt token is exactly parallel to r at
 * layers ≥ 2 (the last token is the same template token for every prompt, so embeddings cancel); schema tokens
 * push the r-projection down (Schema Direction has negative cosine with r); dilution by tool text and the varying
 * share of schema tokens lower the AUROC: chatbot > flattened > schema.
 */
import { mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseModelConfig } from '../checkpoint/config.ts';
import { expectedTensors, isNormTensor, tensorName } from '../checkpoint/tensors.ts';
import { writeRandomCheckpoint } from '../checkpoint/random.ts';
import { makeRng, type Rng } from '../util/rng.ts';
import { writeSafetensors, type TensorToWrite } from '../checkpoint/safetensors.ts';
import { writeFileAtomic, writeJsonAtomic } from '../util/atomic.ts';
import type { Pair } from '../data/types.ts';
import { writePlantedSae } from './planted-sae.ts';

export const PLANTED = {
  hiddenSize: 64,
  numLayers: 4,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 16,
  intermediateSize: 128,
  rmsNormEps: 1e-5,
  /** hidden index whose block writes r (hidden[PLANTED_LAYER] is the first planted layer) */
  plantedLayer: 2,
  /** lexicon feature of harm words */
  A: 0.8,
  /** (negative) lexicon feature of JSON-schema syntax tokens */
  S: 0.45,
  /** sd of the feature of ordinary words */
  sigma: 0.06,
  /** constant f-channel of every embedding */
  beta: 0.3,
  /** gain of the planting block */
  G: 4,
  /** refusal threshold on hidden[L]·r */
  tau: 0.25,
  /** lm_head scale */
  K: 8,
} as const;

/** Harm lexicon: word stems (lower case) whose tokens carry the harm feature. Synthetic, deliberately crude. */
const HARM_STEMS = [
  'steal', 'stole', 'fraud', 'fake', 'forg', 'counterfeit', 'launder', 'hack', 'malware', 'ransom', 'phish',
  'exploit', 'harass', 'stalk', 'threat', 'dox', 'blackmail', 'extort', 'bomb', 'weapon', 'explosive', 'gun',
  'firearm', 'ammunition', 'cocaine', 'meth', 'heroin', 'fentanyl', 'overdose', 'suicid', 'self-harm', 'hate',
  'racist', 'slur', 'pirat', 'leak', 'scam', 'impersonat', 'deepfake', 'disinformation', 'propaganda', 'illegal',
  'unauthori', 'secretly', 'without consent', 'bully', 'humiliat', 'intimidat', 'smuggl', 'untraceable', 'spyware',
  'keylog', 'botnet', 'ddos', 'credential', 'stolen', 'bypass', 'evade', 'poison', 'terror', 'manipulat', 'cheat',
  'plagiar', 'bribe', 'sabotage', 'revenge', 'nude', 'fraudulent', 'falsif', 'hoax', 'conspiracy', 'defam',
  'trafficking', 'illicit', 'crack', 'torrent', 'unlicensed', 'anonymous threat', 'swat', 'kill', 'hurt', 'attack',
];

/** JSON-schema syntax and reserved words: tokens that carry −S. */
const SCHEMA_WORDS = new Set([
  'type', 'properties', 'required', 'parameters', 'object', 'string', 'integer', 'number', 'boolean', 'array',
  'enum', 'items', 'function', 'default', 'anyof', 'oneof', 'minimum', 'maximum', 'format', 'additionalproperties',
]);
const SCHEMA_PUNCT = /^[{}\[\]":,]+$/;

/** Whitespace pre-tokenizer of HF tokenizers (`\w+|[^\w\s]+`), after lower-casing. */
function preTokenize(text: string): string[] {
  return text.toLowerCase().match(/\w+|[^\w\s]+/gu) ?? [];
}

function isHarmWord(w: string): boolean {
  return HARM_STEMS.some((s) => !s.includes(' ') && w.startsWith(s));
}

function isSchemaToken(w: string): boolean {
  return SCHEMA_WORDS.has(w) || (SCHEMA_PUNCT.test(w) && /[{}\[\]"]/.test(w));
}

const SPECIAL_TOKENS = ['[UNK]', '<|begin|>', '<|end|>', '<|system|>', '<|user|>', '<|assistant|>', '<|tool|>'] as const;
/** the chain the refusal path continues with (the first word is chosen by the r-projection) */
const REFUSAL_CHAIN = ['sorry', ',', 'i', 'cannot', 'help', 'with', 'that', '.', '<|end|>'];

/**
 * Chat template of the planted model: Llama-3.1-like; tools are serialized with `tojson` in the system turn, which is
 * where the prompt layer substitutes flattened or pseudoword text.
 */
const PLANTED_TEMPLATE = [
  "{{- bos_token }}",
  "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}",
  "{%- else %}{%- set system_message = 'You are a helpful assistant.' %}{%- set loop_messages = messages %}{%- endif %}",
  "{{- '<|system|>\\n' + system_message }}",
  "{%- if tools %}{{- '\\nYou can call these functions:' }}{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}",
  "{{- '\\nTo call a function, reply with {\"name\": function name, \"parameters\": arguments}.' }}{%- endif %}",
  "{{- '<|end|>' }}",
  "{%- for m in loop_messages %}{{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>' }}{%- endfor %}",
  "{%- if add_generation_prompt %}{{- '<|assistant|>' }}{%- endif %}",
].join('\n');

/** Texts the vocabulary is built from: every file under the given folders (json, jsonl, md, txt). */
function collectTexts(folders: string[]): string[] {
  const out: string[] = [];
  const walk = (p: string): void => {
    let st;
    try { st = statSync(p); } catch { return; }
    if (st.isDirectory()) { for (const f of readdirSync(p).sort()) walk(join(p, f)); return; }
    if (/\.(json|jsonl|md|txt)$/.test(p)) out.push(readFileSync(p, 'utf8'));
  };
  for (const f of folders) walk(f);
  return out;
}

/** Sorted vocabulary: special tokens first, then every pre-token of the texts, then JSON punctuation runs. */
export function buildVocab(texts: string[]): string[] {
  const words = new Set<string>();
  for (const t of [...texts, PLANTED_TEMPLATE, REFUSAL_CHAIN.join(' '), HARM_STEMS.join(' ')]) for (const w of preTokenize(t)) words.add(w);
  // punctuation runs that tojson / prose produce, up to length 3
  const punct = ['{', '}', '[', ']', '"', ':', ',', '.', '(', ')', "'", '-', '_', '/'];
  for (const a of punct) {
    words.add(a);
    for (const b of punct) {
      words.add(a + b);
      for (const c of punct) words.add(a + b + c);
    }
  }
  for (const s of SPECIAL_TOKENS) words.delete(s);
  return [...SPECIAL_TOKENS, ...[...words].sort()];
}

/** tokenizer.json for a WordPiece model with whole-word vocabulary, lower-casing and the Whitespace pre-tokenizer. */
function plantedTokenizerJson(vocab: string[]): Record<string, unknown> {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map((content, id) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100,
      vocab: Object.fromEntries(vocab.map((w, i) => [w, i])),
    },
  };
}

/** Seeded orthonormal basis of R^d (Gram–Schmidt on Gaussian draws). Row i = Q_i. [d, d] */
function orthonormalBasis(d: number, rng: Rng): Float64Array[] {
  const basis: Float64Array[] = [];
  while (basis.length < d) {
    const v = new Float64Array(d);
    for (let i = 0; i < d; i++) v[i] = rng.normal();
    for (const b of basis) {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += v[i]! * b[i]!;
      for (let i = 0; i < d; i++) v[i] = v[i]! - dot * b[i]!;
    }
    let n = 0;
    for (let i = 0; i < d; i++) n += v[i]! * v[i]!;
    n = Math.sqrt(n);
    if (n < 1e-6) continue;
    for (let i = 0; i < d; i++) v[i] = v[i]! / n;
    basis.push(v);
  }
  return basis;
}

/**
 * Learned part of the lexicon: for words seen in at least `minCount` requests, the smoothed share difference
 * (harmful − benign document counts)/(harmful + benign + 2), in [−1, 1]. Deterministic given the pairs.
 */
function learnedLexicon(pairs: readonly Pair[], minCount = 3): Map<string, number> {
  const h = new Map<string, number>();
  const b = new Map<string, number>();
  for (const p of pairs) {
    for (const w of new Set(preTokenize(p.harmful.prompt))) h.set(w, (h.get(w) ?? 0) + 1);
    for (const w of new Set(preTokenize(p.benign.prompt))) b.set(w, (b.get(w) ?? 0) + 1);
  }
  const out = new Map<string, number>();
  for (const w of new Set([...h.keys(), ...b.keys()])) {
    const ch = h.get(w) ?? 0;
    const cb = b.get(w) ?? 0;
    if (ch + cb >= minCount) out.set(w, (ch - cb) / (ch + cb + 2));
  }
  return out;
}

/**
 * The lexical feature a_w of every vocabulary entry [vocab]: +A for curated harm stems, −S for schema syntax,
 * A·(learned score) for words of the learned lexicon, else a small seeded N(0, σ²).
 */
function lexicalFeatures(vocab: string[], rng: Rng, learned: ReadonlyMap<string, number> = new Map()): Float64Array {
  const a = new Float64Array(vocab.length);
  vocab.forEach((w, i) => {
    const noise = Math.max(-0.2, Math.min(0.2, PLANTED.sigma * rng.normal()));
    if ((SPECIAL_TOKENS as readonly string[]).includes(w)) a[i] = 0;
    else if (isHarmWord(w)) a[i] = PLANTED.A;
    else if (isSchemaToken(w)) a[i] = -PLANTED.S;
    else if (learned.has(w)) a[i] = PLANTED.A * learned.get(w)!;
    else a[i] = noise;
  });
  return a;
}

/** Gain of the planting block for unit-norm inputs: G/√(1 + d·ε) (RMSNorm's ε). */
export function plantedGain(): number {
  const d = PLANTED.hiddenSize;
  return PLANTED.G / Math.sqrt(1 + d * PLANTED.rmsNormEps);
}

/**
 * The exact refusal score hidden[l]·r (l ≥ plantedLayer) at the last of T tokens, from each token's lexical feature
 * a_s = E_s·u and noise read-out b_s = E_s·Q3 (unit-norm embeddings):
 *   c_t = mean_{s≤t} b_s / √(1 + dε)            (block 0 writes c_t·Q4, which grows the norm of hidden[1]_t)
 *   score = G · mean_{s≤T} a_s / √(1 + c_s² + dε)   (block 1 reads u through RMSNorm of hidden[1]_s)
 */
export function predictedRefusalScore(a: readonly number[], b: readonly number[]): number {
  const de = PLANTED.hiddenSize * PLANTED.rmsNormEps;
  let sumB = 0;
  let sum = 0;
  for (let t = 0; t < a.length; t++) {
    sumB += b[t]!;
    const c = sumB / (t + 1) / Math.sqrt(1 + de);
    sum += a[t]! / Math.sqrt(1 + c * c + de);
  }
  return (PLANTED.G * sum) / a.length;
}

export interface PlantedTruth {
  /** [d] the planted refusal direction */
  r: number[];
  /** [d] the lexical harm feature */
  u: number[];
  /** [d] the noise coordinate block 0 reads (Q3) */
  q3: number[];
  /** hidden indices at which r is planted (mean difference exactly ∥ r) */
  plantedLayers: number[];
  gain: number;
  tau: number;
  harmStems: string[];
  vocabSize: number;
  seed: number;
}

function f32(v: Float64Array | number[]): Float32Array {
  return Float32Array.from(v);
}

/**
 * The planted model's default word list (committed, one pre-token a line: the words of the bundled pairs, prompts
 * and specs when it was made). A fixture, so pulling a data set or editing data/ never changes the planted weights
 * or the figures made from them.
 */
export const PLANTED_WORDS_FILE = join(import.meta.dirname, 'planted-words.txt');

/**
 * Writes the planted checkpoint (config, generation config, weights, tokenizer, template, PLANTED.json with the
 * ground truth) into `outDir`. `vocabFolders`: folders whose text files define the vocabulary instead of the
 * committed word list (`PLANTED_WORDS_FILE`).
 */
/** `sae`: also write the planted dictionary into `<outDir>/sae` (planted-sae.ts) */
export async function writePlantedModel(outDir: string, opts: { seed?: number; vocabFolders?: string[]; lexiconPairs?: readonly Pair[]; sae?: boolean } = {}): Promise<PlantedTruth> {
  const dir = resolve(outDir);
  mkdirSync(dir, { recursive: true });
  const seed = opts.seed ?? 1234;
  const texts = opts.vocabFolders ? collectTexts(opts.vocabFolders) : [readFileSync(PLANTED_WORDS_FILE, 'utf8')];
  const vocab = buildVocab(texts);
  const V = vocab.length;
  const id = (w: string): number => {
    const i = vocab.indexOf(w);
    if (i < 0) throw new Error(`planted vocabulary lacks '${w}'`);
    return i;
  };
  const P = PLANTED;
  const d = P.hiddenSize;
  const eos = id('<|end|>');
  const bos = id('<|begin|>');
  // config.json + generation_config.json in transformers' format (weights overwritten below)
  await writeRandomCheckpoint(dir, 'llama', {
    seed, numLayers: P.numLayers, hiddenSize: d, numHeads: P.numHeads, numKvHeads: P.numKvHeads, headDim: P.headDim,
    intermediateSize: P.intermediateSize, vocabSize: V, tieWordEmbeddings: false, ropeTheta: 10000,
    rmsNormEps: P.rmsNormEps, ropeScaling: null, bosTokenId: bos, eosTokenId: eos, maxPositionEmbeddings: 8192,
  });
  const config = parseModelConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')), null);

  const rng = makeRng(seed);
  const Q = orthonormalBasis(d, rng);
  const [r, u, f] = [Q[0]!, Q[1]!, Q[2]!];
  const a = lexicalFeatures(vocab, rng, learnedLexicon(opts.lexiconPairs ?? []));

  // embeddings: unit norm, E[w] = a u + β f + sqrt(1-a²-β²) n_w. Refusal-chain words own a basis direction each
  // (Q5..) as n_w, so the chain rows of lm_head read nothing else; other words draw n_w from the remaining span.
  const chainIds = REFUSAL_CHAIN.slice(0, -1).map(id);
  const firstNoise = 5 + chainIds.length;
  const embed = new Float32Array(V * d);
  const noise: Float64Array[] = [];
  for (let w = 0; w < V; w++) {
    const n = new Float64Array(d);
    const chainAt = chainIds.indexOf(w);
    if (chainAt >= 0) n.set(Q[5 + chainAt]!);
    else for (let k = 3; k < d; k++) {
      if (k > 3 && k < firstNoise) continue; // Q4 is block 0's output, Q5.. belong to the chain
      const c = rng.normal();
      for (let i = 0; i < d; i++) n[i] = n[i]! + c * Q[k]![i]!;
    }
    let nn = 0;
    for (let i = 0; i < d; i++) nn += n[i]! * n[i]!;
    nn = Math.sqrt(nn);
    const rest = Math.sqrt(1 - a[w]! * a[w]! - P.beta * P.beta);
    for (let i = 0; i < d; i++) {
      n[i] = n[i]! / nn;
      embed[w * d + i] = a[w]! * u[i]! + P.beta * f[i]! + rest * n[i]!;
    }
    noise.push(n);
  }

  const shapes = expectedTensors(config);
  const tensors: Record<string, TensorToWrite> = {};
  for (const [name, shape] of shapes) {
    const size = shape.reduce((x, y) => x * y, 1);
    const data = new Float32Array(size);
    if (isNormTensor(name)) data.fill(1);
    tensors[name] = { dtype: 'F32', shape, data };
  }
  const put = (name: string): Float32Array => tensors[name]!.data as Float32Array;
  put(tensorName('embed')).set(embed);
  // block 0: mean of the Q3 coordinate → Q4 (content-dependent, ⟂ r)
  // block 1: mean of u·x → G·r. v_proj row 0 (KV head 0, dim 0) reads x_norm/√d; o_proj column 0 (head 0, dim 0) writes.
  const plant = (block: number, read: Float64Array, write: Float64Array, gain: number): void => {
    const v = put(tensorName('v', block)); // [kv*hd, d]
    for (let i = 0; i < d; i++) v[i] = read[i]! / Math.sqrt(d);
    const o = put(tensorName('o', block)); // [d, heads*hd]
    const cols = P.numHeads * P.headDim;
    for (let i = 0; i < d; i++) o[i * cols + 0] = gain * write[i]!;
  };
  plant(0, Q[3]!, Q[4]!, 1);
  plant(P.plantedLayer - 1, u, r, P.G);

  // lm_head: "sorry" = K r ; "{" = K (τ/β) f ; refusal chain through the n_w directions
  const lm = put(tensorName('lmHead'));
  const addRow = (tok: number, vec: Float64Array, scale: number): void => {
    for (let i = 0; i < d; i++) lm[tok * d + i] = lm[tok * d + i]! + scale * vec[i]!;
  };
  addRow(id('sorry'), r, P.K);
  addRow(id('{'), f, (P.K * P.tau) / P.beta);
  for (let k = 0; k + 1 < REFUSAL_CHAIN.length; k++) {
    addRow(id(REFUSAL_CHAIN[k + 1]!), noise[id(REFUSAL_CHAIN[k]!)]!, 3 * P.K);
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'pt' });

  const writeJson = (name: string, value: unknown): void => writeJsonAtomic(join(dir, name), value, 1);
  writeJson('tokenizer.json', plantedTokenizerJson(vocab));
  writeJson('tokenizer_config.json', {
    bos_token: '<|begin|>', eos_token: '<|end|>', unk_token: '[UNK]', chat_template: PLANTED_TEMPLATE,
    tokenizer_class: 'PreTrainedTokenizerFast', model_max_length: 8192, clean_up_tokenization_spaces: false,
  });
  const truth: PlantedTruth = {
    r: Array.from(f32(r)), u: Array.from(f32(u)), q3: Array.from(f32(Q[3]!)),
    plantedLayers: Array.from({ length: P.numLayers - P.plantedLayer + 1 }, (_, i) => P.plantedLayer + i),
    gain: plantedGain(), tau: P.tau, harmStems: HARM_STEMS, vocabSize: V, seed,
  };
  if (opts.sae) writePlantedSae(join(dir, 'sae'), Q);
  writeJson('PLANTED.json', { synthetic: true, description: 'safekeep planted synthetic model: NOT a language model', ...truth });
  writeFileAtomic(join(dir, 'README.md'), '# Planted synthetic model (safekeep)\n\nSYNTHETIC: a 4-block Llama-format checkpoint whose weights plant a known refusal direction (see PLANTED.json and src/experiments/planted.ts). It is not a language model.\n');
  return truth;
}
