/**
 * What the sandbox kernel sends and what a notebook keeps of it. The Python side of the same
 * contract is rewyn_kernel/kernel/record.py: the reply metadata holds
 * `{rewyn_kernel: {event, record}}`, a cell's metadata `{rewyn_kernel: {record}}` (the latest
 * execution's compact record, replaced on each run), and the optional persisted output a
 * summary of the event under EVENT_MIME.
 */
import { JSONObject, PartialJSONObject } from '@lumino/coreutils';

export const METADATA_KEY = 'rewyn_kernel';
export const EVENT_MIME = 'application/vnd.rewyn.sandbox-event+json';
export const EVENT_TYPE = 'SANDBOX_EXECUTED';
/** `implementation` in the sandbox kernel's kernel_info_reply, whatever its kernelspec's name. */
export const KERNEL_IMPLEMENTATION = 'rewyn-kernel';

export function isObject(value: unknown): value is JSONObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The event an execute_reply carries in its metadata, or null when it carries none. */
export function replyEvent(metadata: unknown): JSONObject | null {
  if (!isObject(metadata)) {
    return null;
  }
  const record = metadata[METADATA_KEY];
  const event = isObject(record) ? record['event'] : undefined;
  if (!isObject(event) || event['type'] !== EVENT_TYPE || typeof event['id'] !== 'string') {
    return null;
  }
  return event;
}

/**
 * The compact record an execute_reply carries next to the event (how the execution ended,
 * where, how long, the code's hash), or null. Only a record with a string id counts.
 */
export function replyRecord(metadata: unknown): JSONObject | null {
  if (!isObject(metadata)) {
    return null;
  }
  const holder = metadata[METADATA_KEY];
  const record = isObject(holder) ? holder['record'] : undefined;
  if (!isObject(record) || typeof record['id'] !== 'string') {
    return null;
  }
  return record;
}

/**
 * The cell's metadata entry with `record` as its latest execution's record, other keys kept;
 * null when that record is there already (the same reply seen twice changes nothing). Same
 * rule as set_cell_record in rewyn_kernel/kernel/record.py; tests/test_labextension.py runs
 * both on the same cases.
 */
export function withRecord(entry: unknown, record: JSONObject): PartialJSONObject | null {
  const base: PartialJSONObject = isObject(entry) ? entry : {};
  const known = base['record'];
  if (isObject(known) && known['id'] === record['id']) {
    return null;
  }
  return { ...base, record };
}
