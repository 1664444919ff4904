/** Layer 2 of the trigger: a skill's cheap filter over a stage event (no model call). */
import { stageRoles, stageText, stageTools, type StageEvent } from './event.ts';
import { normalizeText } from './normalize.ts';
import type { SkillFilter } from './skill.ts';

/** Tool-name glob (`*` = any run), case-insensitive: tool sets spell names in CamelCase and snake_case alike. */
export function globMatch(glob: string, name: string): boolean {
  const re = new RegExp(`^${glob.split('*').map((p) => p.replace(/[.+?^${}()|[\]\\-]/g, '\\$&')).join('.*')}$`, 'i');
  return re.test(name);
}

/** null = passes; else the reason it was dropped. (Not asked for a mandatory skill: see guard.ts.) */
export function filterReason(f: SkillFilter, e: StageEvent): string | null {
  if (f.tools) {
    const names = stageTools(e).map(normalizeText);
    if (!names.some((n) => f.tools!.some((g) => globMatch(g, n)))) return `no tool matches ${f.tools.join(', ')}`;
  }
  if (f.roles) {
    const roles = stageRoles(e);
    if (!roles.some((r) => f.roles!.includes(r))) return `no message with role ${f.roles.join(', ')}`;
  }
  if (f.patterns) {
    // the text as a reader sees it: a zero-width or full-width character does not slip a word past a pattern
    const text = normalizeText(stageText(e));
    if (!f.patterns.some((p) => p.test(text))) return 'no pattern matches the stage text';
  }
  return null;
}
