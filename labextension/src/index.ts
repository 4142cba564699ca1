/**
 * The rewyn-kernel JupyterLab / Notebook 7 extension: each cell run on the sandbox kernel keeps
 * the record of its latest execution in its own metadata (recorder.ts), a status line under the
 * cell shows it (status.ts), and the event output the kernel persists on request reads as the
 * same line (the MIME renderer in renderer.ts).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { CellEventRecorder } from './recorder';
import { CellStatusLines } from './status';

const cellEvents: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:cell-events',
  description: 'Keeps the sandbox kernel\'s execution events in the metadata of the cells that ran.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const watch = (panel: NotebookPanel): void => {
      new CellEventRecorder(panel);
    };
    notebooks.forEach(watch);
    notebooks.widgetAdded.connect((__, panel) => watch(panel));
  }
};

const statusLines: JupyterFrontEndPlugin<void> = {
  id: 'rewyn-kernel:status-lines',
  description: 'Shows under each cell how its latest sandboxed execution ended, from its metadata.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_: JupyterFrontEnd, notebooks: INotebookTracker): void => {
    const watch = (panel: NotebookPanel): void => {
      new CellStatusLines(panel);
    };
    notebooks.forEach(watch);
    notebooks.widgetAdded.connect((__, panel) => watch(panel));
  }
};

export default [cellEvents, statusLines];
