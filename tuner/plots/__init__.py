"""Pictures of runs and parameters, drawn with matplotlib's Agg backend (files only, no display).

* `tuner.plots.figure`: a Figure on the Agg canvas and its atomic PNG write;
* `tuner.plots.params`: piece-square tables as 8x8 boards, the other parameters as bar charts
  (`tuner plot`);
* `tuner.plots.diff`: the largest changes between two parameter files (`tuner diff`);
* `tuner.cli.plots`: those two Click commands.

The loss curve of a run is `tuner.train.plot.write_loss_plot`. Importing this package is light;
matplotlib is imported by the modules that draw.
"""
