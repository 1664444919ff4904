/**
 * JSON read without loss, for text that is JSON inside a string (a tool call's `arguments`): `JSON.parse` collapses
 * duplicate keys (last wins) and rounds numbers to doubles, so a reader that parses the string and a template that
 * prints it byte for byte see different things — `{"body": "<harm>", "body": "Hello"}` reads as "Hello", and
 * `12345678901234567890` as `…7000`. Here a duplicate key at any depth is an error naming its path, every number
 * keeps the digits it was written with (`JsonNumber`), and `stringifyLossless` writes the value back compactly with
 * those digits: the re-serialisation is exactly what the reader read.
 */
import { SafekeepError } from './errors.ts';
import { MAX_JSON_DEPTH } from './json-bounded.ts';

/** A duplicate key: the text is JSON, but two readers may read it differently. */
export class JsonDuplicateKeyError extends SafekeepError {}

/** A JSON number as written (its lexeme), so no digit is lost on the way through. */
export class JsonNumber {
  constructor(readonly text: string) {}
  /** the nearest double (what `JSON.parse` would give) */
  get value(): number {
    return Number(this.text);
  }
  toJSON(): number {
    return this.value;
  }
}

/** A value read by `parseJsonLossless`: JSON's types, numbers as `JsonNumber`. */
export type LosslessValue = null | boolean | string | JsonNumber | LosslessValue[] | { [key: string]: LosslessValue };

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const WS = /[ \t\n\r]*/y;

class Reader {
  i = 0;
  constructor(readonly text: string, readonly what: string, readonly maxDepth: number) {}

  fail(msg: string): never {
    throw new SafekeepError(`${this.what}: ${msg}`);
  }

  ws(): void {
    WS.lastIndex = this.i;
    WS.exec(this.text);
    this.i = WS.lastIndex;
  }

  value(path: string, depth: number): LosslessValue {
    this.ws();
    const c = this.text[this.i];
    if (c === '{' || c === '[') {
      if (depth + 1 > this.maxDepth) this.fail(`JSON nested more than ${this.maxDepth} levels deep`);
      return c === '{' ? this.object(path, depth + 1) : this.array(path, depth + 1);
    }
    if (c === '"') return this.string();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]] as const) {
      if (this.text.startsWith(word, this.i)) {
        this.i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = this.i;
    const m = NUMBER.exec(this.text);
    if (!m) this.fail(`not valid JSON at character ${this.i}`);
    this.i += m[0].length;
    return new JsonNumber(m[0]);
  }

  string(): string {
    // the string's extent by the grammar, then its decoding by the platform (escapes, surrogates)
    let j = this.i + 1;
    for (;;) {
      const c = this.text.charCodeAt(j);
      if (Number.isNaN(c)) this.fail('unterminated string');
      if (c === 0x22) break;
      if (c < 0x20) this.fail(`control character in a string at character ${j}`);
      j += c === 0x5c ? 2 : 1;
    }
    const lit = this.text.slice(this.i, j + 1);
    this.i = j + 1;
    try {
      return JSON.parse(lit) as string;
    } catch {
      return this.fail(`bad escape in a string near character ${this.i}`);
    }
  }

  object(path: string, depth: number): { [key: string]: LosslessValue } {
    // defineProperty: a key `__proto__` stays an own key, as JSON.parse keeps it
    const out: { [key: string]: LosslessValue } = {};
    this.i++;
    this.ws();
    if (this.text[this.i] === '}') {
      this.i++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.text[this.i] !== '"') this.fail(`expected a key at character ${this.i}`);
      const key = this.string();
      if (Object.prototype.hasOwnProperty.call(out, key)) throw new JsonDuplicateKeyError(`${this.what}: duplicate key ${JSON.stringify(key)} at ${path || '(top)'} (a reader would see one of its values and a template the other)`);
      this.ws();
      if (this.text[this.i] !== ':') this.fail(`expected ':' at character ${this.i}`);
      this.i++;
      Object.defineProperty(out, key, { value: this.value(`${path}.${key}`, depth), enumerable: true, writable: true, configurable: true });
      this.ws();
      const c = this.text[this.i++];
      if (c === '}') return out;
      if (c !== ',') this.fail(`expected ',' or '}' at character ${this.i - 1}`);
    }
  }

  array(path: string, depth: number): LosslessValue[] {
    const out: LosslessValue[] = [];
    this.i++;
    this.ws();
    if (this.text[this.i] === ']') {
      this.i++;
      return out;
    }
    for (;;) {
      out.push(this.value(`${path}[${out.length}]`, depth));
      this.ws();
      const c = this.text[this.i++];
      if (c === ']') return out;
      if (c !== ',') this.fail(`expected ',' or ']' at character ${this.i - 1}`);
    }
  }
}

/** Parse JSON text without loss: duplicate keys refused (SafekeepError naming the path), numbers kept as written. */
export function parseJsonLossless(text: string, what: string, maxDepth = MAX_JSON_DEPTH): LosslessValue {
  const r = new Reader(text, what, maxDepth);
  const v = r.value('', 0);
  r.ws();
  if (r.i !== text.length) r.fail(`unexpected text after the JSON value at character ${r.i}`);
  return v;
}

/** Compact JSON of a lossless value: numbers with their own digits, strings escaped as `JSON.stringify` does. */
export function stringifyLossless(v: LosslessValue): string {
  if (v instanceof JsonNumber) return v.text;
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(stringifyLossless).join(',')}]`;
  return `{${Object.keys(v).map((k) => `${JSON.stringify(k)}:${stringifyLossless(v[k]!)}`).join(',')}}`;
}
