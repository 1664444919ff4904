/**
 * A parser for Python literals as they appear in InjecAgent's data (`"{'product_id': 'B08KFQ9HK5'}"`):
 * dicts, lists, tuples, str ('…' or "…", with backslash escapes), int, float, True, False, None.
 * Anything else is an error naming the offset. The result is plain JSON data (tuples become arrays).
 */

type PyValue = null | boolean | number | string | PyValue[] | { [key: string]: PyValue };

export class PyLiteralError extends Error {
  constructor(message: string, readonly offset: number) {
    super(`${message} at offset ${offset}`);
    this.name = 'PyLiteralError';
  }
}

const ESCAPES: Record<string, string> = { n: '\n', t: '\t', r: '\r', '\\': '\\', "'": "'", '"': '"', '0': '\0', a: '\x07', b: '\b', f: '\f', v: '\v' };

export function parsePyLiteral(text: string): PyValue {
  let i = 0;
  const ws = (): void => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  const expect = (c: string): void => {
    ws();
    if (text[i] !== c) throw new PyLiteralError(`expected '${c}'`, i);
    i++;
  };
  const str = (): string => {
    const q = text[i]!;
    i++;
    let out = '';
    while (i < text.length && text[i] !== q) {
      const c = text[i]!;
      if (c === '\\') {
        const n = text[i + 1];
        if (n === undefined) break;
        if (n === 'x' || n === 'u') {
          const len = n === 'x' ? 2 : 4;
          const hex = text.slice(i + 2, i + 2 + len);
          if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== len) throw new PyLiteralError('bad escape', i);
          out += String.fromCharCode(parseInt(hex, 16));
          i += 2 + len;
          continue;
        }
        out += ESCAPES[n] ?? `\\${n}`;
        i += 2;
        continue;
      }
      out += c;
      i++;
    }
    if (text[i] !== q) throw new PyLiteralError('unterminated string', i);
    i++;
    return out;
  };
  const seq = (close: string): PyValue[] => {
    const items: PyValue[] = [];
    ws();
    while (text[i] !== close) {
      items.push(value());
      ws();
      if (text[i] === ',') { i++; ws(); continue; }
      if (text[i] !== close) throw new PyLiteralError(`expected ',' or '${close}'`, i);
    }
    i++;
    return items;
  };
  const value = (): PyValue => {
    ws();
    const c = text[i];
    if (c === undefined) throw new PyLiteralError('unexpected end', i);
    if (c === "'" || c === '"') {
      let s = str();
      // adjacent string literals concatenate, as in Python
      for (;;) {
        const save = i;
        ws();
        if (text[i] === "'" || text[i] === '"') s += str();
        else { i = save; break; }
      }
      return s;
    }
    if (c === '{') {
      i++;
      const obj: { [key: string]: PyValue } = {};
      ws();
      while (text[i] !== '}') {
        const k = value();
        if (typeof k !== 'string' && typeof k !== 'number') throw new PyLiteralError('dict keys must be strings or numbers', i);
        expect(':');
        obj[String(k)] = value();
        ws();
        if (text[i] === ',') { i++; ws(); continue; }
        if (text[i] !== '}') throw new PyLiteralError("expected ',' or '}'", i);
      }
      i++;
      return obj;
    }
    if (c === '[') { i++; return seq(']'); }
    if (c === '(') { i++; return seq(')'); }
    const m = /^(?:True|False|None|[-+]?(?:\d[\d_]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))/.exec(text.slice(i));
    if (!m || !m[0]) throw new PyLiteralError(`unexpected '${c}'`, i);
    i += m[0].length;
    if (m[0] === 'True') return true;
    if (m[0] === 'False') return false;
    if (m[0] === 'None') return null;
    return Number(m[0].replace(/_/g, ''));
  };
  const v = value();
  ws();
  if (i !== text.length) throw new PyLiteralError('trailing text', i);
  return v;
}
