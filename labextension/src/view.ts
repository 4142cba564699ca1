/**
 * The event output as one status line, with the details a reviewer asks next folded beneath it.
 *
 * The summary comes from the kernel, but strings in it (the message, isolation notes) can carry
 * text the sandboxed code chose, so everything is set as text, never parsed as HTML, and every
 * field is checked for its type and cut to a bounded length.
 */
import { isObject } from './event';

const MAX_TEXT = 400;
const MAX_LABEL = 40;
const MAX_NOTES = 10;

type Tone = 'ok' | 'error' | 'warn';

export function renderEvent(summary: unknown, fallback: string): HTMLElement {
  const root = element('div', 'rewyn-Event');
  if (!isObject(summary)) {
    root.append(element('span', 'rewyn-Event-fallback', text(fallback)));
    return root;
  }
  const [status, tone] = statusOf(summary);
  const details = element('details', 'rewyn-Event-details');
  const line = element('summary', 'rewyn-Event-line');
  const badge = element('span', 'rewyn-Event-status', status);
  badge.dataset.tone = tone;
  line.append(badge, element('span', 'rewyn-Event-facts', facts(summary).join(' · ')));
  for (const warning of warnings(summary)) {
    line.append(element('span', 'rewyn-Event-badge', warning));
  }
  details.append(line, rows(summary));
  root.dataset.ending = text(summary['ending']);
  root.title = text(summary['message']) || 'sandbox execution: click for details';
  root.append(details);
  return root;
}

function statusOf(summary: Record<string, unknown>): [string, Tone] {
  const exitCode = exitText(summary['exit_code']);
  switch (summary['ending']) {
    case 'completed':
      return ['ok', 'ok'];
    case 'exit':
      return exitCode === '0' ? ['ok', 'ok'] : [`exit ${exitCode}`, 'error'];
    case 'exception':
      return ['error', 'error'];
    case 'timeout':
      return ['timed out', 'error'];
    case 'interrupted':
      return ['interrupted', 'warn'];
    case 'oom':
      return ['out of memory', 'error'];
    case 'crashed':
      return ['crashed', 'error'];
    case 'start_failed':
      return ['did not start', 'error'];
    case 'protocol_error':
      return ['protocol error', 'error'];
    default:
      return [label(summary['ending']) || 'unknown', 'warn'];
  }
}

function facts(summary: Record<string, unknown>): string[] {
  const isolation = objectAt(summary, 'isolation');
  const network = label(isolation['network']).replace(/_/g, ' ') || 'unknown';
  const where = `${label(summary['provider']) || 'unknown provider'}, network ${network}`;
  const files = label(isolation['files']);
  return [
    'sandbox',
    `exit ${exitText(summary['exit_code'])}`,
    duration(summary['duration_ms']),
    files && files !== 'open' ? `${where}, files ${files}` : where
  ];
}

function warnings(summary: Record<string, unknown>): string[] {
  const found: string[] = [];
  const spec = objectAt(summary, 'spec');
  const isolation = objectAt(summary, 'isolation');
  if (spec['network'] === 'none' && isolation['network'] !== 'isolated') {
    found.push('network not isolated'); // asked for none, but this provider could not cut it
  }
  if (isolation['files'] === 'open') {
    found.push('host files open'); // the code reads and writes the host's files as the user
  }
  if (summary['stdout_truncated'] === true || summary['stderr_truncated'] === true) {
    const total = count(summary['stdout_bytes']) + count(summary['stderr_bytes']);
    found.push(`output truncated (${bytes(total)} printed)`);
  }
  if (summary['state_lost'] === true) {
    found.push('state lost before this cell');
  }
  if (summary['sandbox_restarted'] === true) {
    found.push('sandbox restarted: variables lost');
  }
  return found;
}

function rows(summary: Record<string, unknown>): HTMLElement {
  const list = element('dl', 'rewyn-Event-rows');
  const add = (name: string, value: string): void => {
    if (value) {
      list.append(element('dt', '', name), element('dd', '', value));
    }
  };
  const spec = objectAt(summary, 'spec');
  const isolation = objectAt(summary, 'isolation');
  add('message', text(summary['message']));
  add('started', text(summary['started_at']));
  add('limits', limits(spec));
  add('isolation', isolationText(isolation));
  const notes = Array.isArray(isolation['notes']) ? isolation['notes'] : [];
  for (const note of notes.slice(0, MAX_NOTES)) {
    add('note', text(note));
  }
  add('stdout', streamText(summary, 'stdout'));
  add('stderr', streamText(summary, 'stderr'));
  const hash = text(summary['code_hash']).slice(0, 16);
  const code = sizeText(summary['code_bytes']);
  add('code', [code, hash ? `sha256 ${hash}…` : ''].filter(Boolean).join(', '));
  add('event', text(summary['id']));
  return list;
}

function limits(spec: Record<string, unknown>): string {
  const timeout = spec['timeout'];
  const memory = spec['memory_limit_mb'];
  const output = spec['output_limit_bytes'];
  return [
    typeof timeout === 'number' ? `timeout ${timeout} s` : 'no timeout',
    typeof memory === 'number' ? `memory ${memory} MB` : 'no memory cap',
    `network ${text(spec['network']) || 'unknown'}`,
    count(output) > 0 ? `output cap ${bytes(count(output))} per stream` : ''
  ]
    .filter(Boolean)
    .join(' · ');
}

function isolationText(isolation: Record<string, unknown>): string {
  const parts = [text(isolation['filesystem'])];
  if (typeof isolation['pid_namespace'] === 'boolean') {
    parts.push(isolation['pid_namespace'] ? 'own PID namespace' : 'host PID namespace');
  }
  if (typeof isolation['user_namespace'] === 'boolean') {
    parts.push(isolation['user_namespace'] ? 'own user namespace' : 'host user namespace');
  }
  return parts.filter(Boolean).join(' · ');
}

/** A stream's size as the record gives it; '' (no row) where the record has no size. */
function streamText(summary: Record<string, unknown>, stream: 'stdout' | 'stderr'): string {
  const size = sizeText(summary[`${stream}_bytes`]);
  return size && summary[`${stream}_truncated`] === true ? `${size}, truncated` : size;
}

/** A byte count as text; '' where the value is not one (a record that left it out). */
function sizeText(value: unknown): string {
  return Number.isSafeInteger(value) && (value as number) >= 0 ? bytes(value as number) : '';
}

function duration(value: unknown): string {
  const ms = numberOr(value, NaN);
  if (!Number.isFinite(ms) || ms < 0) {
    return 'duration unknown';
  }
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

function bytes(value: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB'];
  let size = value;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${size} bytes` : `${size.toFixed(1)} ${units[unit]}`;
}

/** The object under `key`, or an empty one when the field is missing or not an object. */
function objectAt(summary: Record<string, unknown>, key: string): Record<string, unknown> {
  const value = summary[key];
  return isObject(value) ? value : {};
}

function numberOr(value: unknown, otherwise: number): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : otherwise;
}

/** A byte count: a whole number, not negative; anything else counts as 0. */
function count(value: unknown): number {
  return Number.isSafeInteger(value) && (value as number) > 0 ? (value as number) : 0;
}

function exitText(value: unknown): string {
  return Number.isSafeInteger(value) ? String(value) : '?';
}

/** Text for the one-line summary, where a long value would push the line out of shape. */
function label(value: unknown): string {
  const whole = text(value);
  return whole.length > MAX_LABEL ? `${whole.slice(0, MAX_LABEL)}…` : whole;
}

function text(value: unknown): string {
  if (typeof value !== 'string') {
    return '';
  }
  return value.length > MAX_TEXT ? `${value.slice(0, MAX_TEXT)}…` : value;
}

function element(tag: string, className: string, content?: string): HTMLElement {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (content !== undefined) {
    node.textContent = content;
  }
  return node;
}
