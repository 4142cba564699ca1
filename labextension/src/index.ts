/**
 * The rewyn-kernel JupyterLab / Notebook 7 extension: each cell run on the sandbox kernel keeps
 * its SANDBOX_EXECUTED events in its own metadata (this plugin), and the event output the kernel
 * persists reads as one status line (the MIME renderer in renderer.ts).
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { CellEventRecorder } from './recorder';

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

export default cellEvents;
