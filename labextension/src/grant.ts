/**
 * Network granted from the page: when the sandbox's proxy refused a cell a host, the kernel puts
 * offers in the cell's record (`{rewyn_kernel: {record: {offers: [{grant, hosts, title}]}}}`)
 * and the status line shows a button for each ("Allow pypi.org for this notebook"). A click
 * opens a comm on the target `rewyn_kernel.grants`, which the kernel answers on its host side
 * (rewyn_kernel/kernel/grants.py); nothing in the sandbox hears it, and the kernel grants only
 * a host it refused, or a preset, with exactly the hosts the button showed.
 *
 * The command "Network grants of this notebook" lists the notebook's grants and revokes them.
 * A notebook file can hold any JSON: offers are read through the checks below, and a forged
 * one draws a button the kernel will not honour.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { isObject, KERNEL_IMPLEMENTATION } from './event';

export const GRANT_TARGET = 'rewyn_kernel.grants';
export const GRANTS_COMMAND = 'rewyn-kernel:network-grants';
export const GRANTS_LABEL = 'Network grants of this notebook';
const BUTTON_CLASS = 'rewyn-CellStatus-grant';
const MAX_OFFERS = 8;
const MAX_TEXT = 300;

export interface IOffer {
  grant: string;
  hosts: string[];
  title: string;
}

/** The offers of a cell's record, checked (at most MAX_OFFERS; [] for none). */
export function offersOf(record: unknown): IOffer[] {
  const offers = isObject(record) ? record['offers'] : undefined;
  if (!Array.isArray(offers)) {
    return [];
  }
  const found: IOffer[] = [];
  for (const offer of offers.slice(0, MAX_OFFERS)) {
    if (!isObject(offer)) {
      continue;
    }
    const { grant, hosts, title } = offer;
    if (
      typeof grant !== 'string' ||
      typeof title !== 'string' ||
      !Array.isArray(hosts) ||
      hosts.length === 0 ||
      !hosts.every(host => typeof host === 'string' && host.length <= MAX_TEXT) ||
      grant.length > MAX_TEXT ||
      title.length > MAX_TEXT
    ) {
      continue;
    }
    found.push({ grant, hosts: hosts as string[], title });
  }
  return found;
}

/** What the button says: the host it grants, or the preset's title and every host of it. */
export function offerLabel(offer: IOffer): string {
  if (offer.hosts.length === 1 && offer.hosts[0] === offer.grant) {
    return `Allow ${offer.grant} for this notebook`;
  }
  return `Allow ${offer.title} for this notebook (${offer.hosts.join(', ')})`;
}

/** The kernel's answer to one request on the grants' comm. */
export async function askKernel(
  panel: NotebookPanel,
  data: { [key: string]: string | string[] }
): Promise<{ [key: string]: unknown }> {
  const kernel = panel.sessionContext.session?.kernel ?? null;
  if (kernel === null) {
    return { ok: false, text: 'the notebook has no kernel' };
  }
  const info = await kernel.info;
  if (info.implementation !== KERNEL_IMPLEMENTATION) {
    return { ok: false, text: 'the notebook does not run on the sandbox kernel' };
  }
  const comm = kernel.createComm(GRANT_TARGET);
  const answer = new Promise<{ [key: string]: unknown }>(resolve => {
    comm.onMsg = msg => {
      const got = msg.content.data;
      resolve(isObject(got) ? got : { ok: false, text: 'the kernel answered nothing' });
    };
  });
  comm.open(data);
  try {
    return await answer;
  } finally {
    if (!comm.isDisposed) {
      comm.close();
    }
  }
}

/** The buttons for ``offers`` in a cell's status line. */
export function grantButtons(panel: NotebookPanel, offers: IOffer[]): HTMLElement[] {
  return offers.map(offer => {
    const button = document.createElement('button');
    button.className = BUTTON_CLASS;
    button.textContent = offerLabel(offer);
    button.title = `Lets the code of this notebook reach ${offer.hosts.join(', ')}, from now on and in its later kernels (revoke: the command "${GRANTS_LABEL}")`;
    button.addEventListener('click', async () => {
      button.disabled = true;
      const answer = await askKernel(panel, {
        action: 'grant',
        grant: offer.grant,
        hosts: offer.hosts
      });
      const text = typeof answer['text'] === 'string' ? answer['text'] : '';
      if (answer['ok'] === true) {
        const done = document.createElement('span');
        done.className = BUTTON_CLASS;
        done.textContent = answer['live'] === true ? `allowed ${offer.hosts.join(', ')}` : text;
        button.replaceWith(done);
        Notification.success(text, { autoClose: 8000 });
      } else {
        button.disabled = false;
        Notification.warning(text || 'the kernel refused the grant', { autoClose: false });
      }
    });
    return button;
  });
}

function paragraph(text: string): HTMLElement {
  const node = document.createElement('p');
  node.textContent = text;
  return node;
}

/** Show the notebook's grants, each with a button that revokes it, and the presets. */
export async function showGrants(panel: NotebookPanel): Promise<void> {
  const listing = await askKernel(panel, { action: 'list' });
  const body = document.createElement('div');
  const draw = (answer: { [key: string]: unknown }): void => {
    const grants = Array.isArray(answer['grants']) ? answer['grants'] : [];
    body.replaceChildren();
    if (answer['ok'] !== true) {
      body.textContent = String(answer['text'] ?? 'the kernel did not answer');
      return;
    }
    if (grants.length === 0) {
      body.append(paragraph('This notebook has no network grants.'));
    }
    for (const grant of grants) {
      if (!isObject(grant) || typeof grant['name'] !== 'string' || !Array.isArray(grant['hosts'])) {
        continue;
      }
      const name = grant['name'];
      const row = document.createElement('div');
      row.textContent = `${name}: ${grant['hosts'].join(', ')} `;
      const revoke = document.createElement('button');
      revoke.className = BUTTON_CLASS;
      revoke.textContent = 'Revoke';
      revoke.addEventListener('click', async () => {
        const answer = await askKernel(panel, { action: 'revoke', grant: name });
        Notification.info(String(answer['text'] ?? ''), { autoClose: 8000 });
        draw(answer);
      });
      row.append(revoke);
      body.append(row);
    }
    const presets = offersOf({ offers: answer['presets'] });
    if (presets.length > 0) {
      const none = answer['network'] === 'none';
      body.append(
        paragraph(
          none
            ? 'Presets (this kernel has no network: a grant applies from its next kernel, and a restart loses the state):'
            : 'Presets:'
        )
      );
      for (const button of grantButtons(panel, presets)) {
        const row = document.createElement('div');
        row.append(button);
        body.append(row);
      }
    }
  };
  draw(listing);
  await showDialog({
    title: GRANTS_LABEL,
    body: new Widget({ node: body }),
    buttons: [Dialog.okButton({ label: 'Close' })]
  });
}
