/**
 * The one text form every S³ pattern and rule reads: NFKC (full-width letters, ligatures, mathematical letters and
 * the full-width '＠' become their plain forms) with the invisible format characters removed (zero-width space and
 * joiners, word joiner, BOM, soft hyphen, bidi marks: `\p{Cf}`, and the other default-ignorable code points), so
 * that `ig\u200Bnore` or `eve@evil\u200B.com` reads as what a model reading it sees. Checks shown to a model get the
 * raw text; only the patterns and rules read this one.
 */
const INVISIBLE = /[\p{Cf}\p{Default_Ignorable_Code_Point}]/gu;

export function normalizeText(s: string): string {
  // NFKC can itself produce a format character (rarely), so strip after it; strip before it too, so that an
  // invisible character cannot sit between a letter and the mark NFKC would compose it with
  return s.replace(INVISIBLE, '').normalize('NFKC').replace(INVISIBLE, '');
}
