/**
 * Parser for the Python literals InjecAgent stores tool parameters in (`{'product_id': 'B08', 'n': 3}`):
 * dicts, lists, tuples, str (single/double quotes, escapes), int/float, True/False/None. Nothing is evaluated.
 */

export function parsePythonLiteral(src: string): unknown {
  let i = 0;
  const ws = () => { while (i < src.length && /\s/.test(src[i]!)) i++; };
  const fail = (what: string): never => { throw new Error(`python literal: ${what} at ${i} in ${JSON.stringify(src.slice(0, 80))}`); };
  function value(): unknown {
    ws();
    const c = src[i];
    if (c === '{') {
      i++;
      const o: Record<string, unknown> = {};
      ws();
      if (src[i] === '}') { i++; return o; }
      for (;;) {
        const k = value();
        ws();
        if (src[i] !== ':') fail('expected :');
        i++;
        o[String(k)] = value();
        ws();
        if (src[i] === ',') { i++; ws(); if (src[i] === '}') { i++; return o; } continue; }
        if (src[i] === '}') { i++; return o; }
        fail('expected , or }');
      }
    }
    if (c === '[' || c === '(') {
      const close = c === '[' ? ']' : ')';
      i++;
      const a: unknown[] = [];
      ws();
      if (src[i] === close) { i++; return a; }
      for (;;) {
        a.push(value());
        ws();
        if (src[i] === ',') { i++; ws(); if (src[i] === close) { i++; return a; } continue; }
        if (src[i] === close) { i++; return a; }
        fail(`expected , or ${close}`);
      }
    }
    if (c === "'" || c === '"') {
      i++;
      let s = '';
      while (i < src.length && src[i] !== c) {
        if (src[i] === '\\') {
          const e = src[i + 1];
          s += e === 'n' ? '\n' : e === 't' ? '\t' : e === 'r' ? '\r' : (e ?? '');
          i += 2;
        } else s += src[i++];
      }
      if (src[i] !== c) fail('unterminated string');
      i++;
      return s;
    }
    const m = /^(True|False|None|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)/.exec(src.slice(i));
    if (!m) return fail('unexpected character');
    i += m[0].length;
    return m[0] === 'True' ? true : m[0] === 'False' ? false : m[0] === 'None' ? null : Number(m[0]);
  }
  const v = value();
  ws();
  if (i !== src.length) fail('trailing text');
  return v;
}
