/**
 * Pseudoword randomization of tool specs (paper §3.3): the lexical content of tool names, descriptions, argument
 * names and argument descriptions is replaced by pronounceable pseudowords of about the same length (each word
 * within ±20 % characters), while the schema's structure, types, enums, defaults and required lists stay (required
 * entries renamed consistently). Seeded and deterministic.
 *
 * Replacement is a word-level cipher shared by the whole tool list: each distinct letter run (case-insensitive)
 * maps to one pseudoword, so the same word gets the same pseudoword everywhere (e.g. `file_path` in two tools).
 * The cipher is injective and never reproduces a word of the original text, so distinct names stay distinct and
 * valid identifiers stay valid identifiers (letters map to letters; `_`, digits and punctuation are kept).
 */
import type { JsonSchema, ToolSpec } from '../data/types.ts';
import { makeRng } from '../util/rng.ts';

const ONSETS = ['b', 'd', 'f', 'g', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'z', 'br', 'dr', 'gr', 'pl', 'st', 'tr', 'sh', 'ch'];
const VOWELS = ['a', 'e', 'i', 'o', 'u', 'a', 'e', 'o', 'ai', 'ou', 'ee'];
const CODAS = ['', '', '', 'n', 'r', 'l', 's', 'm'];

function pick<T>(rng: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rng() * xs.length)]!;
}

/** A pronounceable lowercase pseudoword of exactly `length` letters (CV(C) syllables, truncated). */
export function pseudoword(rng: () => number, length: number): string {
  if (length <= 0) return '';
  if (length === 1) return pick(rng, [...'abcdefghijklmnopqrstuvwxyz']);
  for (;;) {
    let w = '';
    while (w.length < length) w += pick(rng, ONSETS) + pick(rng, VOWELS) + pick(rng, CODAS);
    w = w.slice(0, length);
    // truncation can leave a vowel-less word ('tr') or a hard final cluster: draw again
    if (/[aeiou]/.test(w) && !/[^aeiou]{3}$/.test(w)) return w;
  }
}

/** Word-level cipher: letter runs → pseudowords (injective, seeded, never an original word). */
class PseudowordCipher {
  private readonly rng: () => number;
  private readonly map = new Map<string, string>();
  private readonly used = new Set<string>();
  private readonly forbidden: ReadonlySet<string>;

  /** `forbidden`: lowercase words that must never be produced (the original vocabulary). */
  constructor(seed: number, forbidden: Iterable<string> = []) {
    this.rng = makeRng(seed).uniform;
    this.forbidden = new Set([...forbidden].map((w) => w.toLowerCase()));
  }

  /** Pseudoword for one letter run, keeping its capitalisation pattern (lower, Capitalised, UPPER). */
  word(original: string): string {
    const key = original.toLowerCase();
    let w = this.map.get(key);
    if (w === undefined) {
      const n = key.length;
      const lo = Math.max(1, Math.ceil(n * 0.8));
      const hi = Math.max(lo, Math.floor(n * 1.2));
      for (let attempt = 0; ; attempt++) {
        // within the ±20 % band first; only if the band is exhausted (very short words) grow beyond it,
        // so that the cipher stays injective
        const len = attempt < 500 ? lo + Math.floor(this.rng() * (hi - lo + 1)) : hi + 1 + Math.floor((attempt - 500) / 100);
        const cand = pseudoword(this.rng, len);
        if (!this.used.has(cand) && !this.forbidden.has(cand) && cand !== key) {
          w = cand;
          break;
        }
      }
      this.map.set(key, w);
      this.used.add(w);
    }
    if (original.length > 1 && original === original.toUpperCase()) return w.toUpperCase();
    if (original[0] !== original[0]!.toLowerCase()) return w[0]!.toUpperCase() + w.slice(1);
    return w;
  }

  /** Replace every letter run of `text`; everything else (digits, `_`, spaces, punctuation) is kept. */
  text(text: string): string {
    return text.replace(/[A-Za-z]+/g, (m) => this.word(m));
  }
}

/** Letter runs of a text, lowercase. */
function wordsOf(text: string): string[] {
  return (text.match(/[A-Za-z]+/g) ?? []).map((w) => w.toLowerCase());
}

function collectWords(v: unknown, out: Set<string>): void {
  if (typeof v === 'string') wordsOf(v).forEach((w) => out.add(w));
  else if (Array.isArray(v)) v.forEach((x) => collectWords(x, out));
  else if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) {
      wordsOf(k).forEach((w) => out.add(w));
      collectWords(x, out);
    }
  }
}

/**
 * `name`, or `name2`, `name3`, ... if taken (only when two originals differ just in letter case, e.g. `getUser`
 * and `getuser`, which the case-insensitive cipher maps alike). Records the result in `used`.
 */
function uniqueName(name: string, used: Set<string>): string {
  let out = name;
  for (let i = 2; used.has(out); i++) out = `${name}${i}`;
  used.add(out);
  return out;
}

function isSchema(v: unknown): v is JsonSchema {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Rename argument names and rewrite descriptions/titles inside a schema; everything else is copied as is.
 * `properties` keys are renamed; a sibling `required` list is renamed with the same map.
 */
function randomizeSchema(s: JsonSchema, cipher: PseudowordCipher): JsonSchema {
  const out: JsonSchema = {};
  let renames: Map<string, string> | null = null;
  if (isSchema(s.properties)) {
    const used = new Set<string>();
    renames = new Map(Object.keys(s.properties).map((k) => [k, uniqueName(cipher.text(k), used)]));
  }
  for (const [key, val] of Object.entries(s)) {
    if ((key === 'description' || key === 'title') && typeof val === 'string') out[key] = cipher.text(val);
    else if (key === 'properties' && isSchema(val) && renames) {
      out[key] = Object.fromEntries(Object.entries(val).map(([k, sub]) => [renames!.get(k)!, isSchema(sub) ? randomizeSchema(sub, cipher) : sub]));
    } else if (key === 'required' && Array.isArray(val) && renames) {
      out[key] = val.map((r) => (typeof r === 'string' ? (renames!.get(r) ?? r) : r));
    } else if ((key === 'items' || key === 'additionalProperties' || key === 'not') && isSchema(val)) {
      out[key] = randomizeSchema(val, cipher);
    } else if ((key === 'anyOf' || key === 'oneOf' || key === 'allOf' || key === 'prefixItems' || key === 'items') && Array.isArray(val)) {
      out[key] = val.map((x) => (isSchema(x) ? randomizeSchema(x, cipher) : x));
    } else if ((key === '$defs' || key === 'definitions') && isSchema(val)) {
      // definition names are referenced by $ref: keep them, randomize their content
      out[key] = Object.fromEntries(Object.entries(val).map(([k, sub]) => [k, isSchema(sub) ? randomizeSchema(sub, cipher) : sub]));
    } else {
      out[key] = structuredClone(val);
    }
  }
  return out;
}

/**
 * Pseudoword versions of a tool list (same order). Deterministic in (tools, seed); the cipher is shared by all
 * tools of the list. Tool names, descriptions, argument names and argument descriptions are replaced.
 */
export function pseudowordTools(tools: readonly ToolSpec[], seed: number): ToolSpec[] {
  const vocab = new Set<string>();
  for (const t of tools) collectWords(t, vocab);
  const cipher = new PseudowordCipher(seed, vocab);
  const usedNames = new Set<string>();
  return tools.map((t) => ({
    ...structuredClone(t),
    function: {
      ...structuredClone(t.function),
      name: uniqueName(cipher.text(t.function.name), usedNames),
      description: cipher.text(t.function.description ?? ''),
      parameters: isSchema(t.function.parameters) ? randomizeSchema(t.function.parameters, cipher) : structuredClone(t.function.parameters),
    },
  }));
}
