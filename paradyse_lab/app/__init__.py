"""The application: what runs the solvers, the simulator, the runtime and the figures together.

- `reproduce`: `paradyse-lab reproduce`, every experiment of the paper, cached and resumable; its parts in
  reproduce_*.py (settings, outputs, the steps by kind, figures, the background steps);
- report/: REPORT.md of a reproduction, the paper's numbers beside ours;
- `api`: the public Python API (`import paradyse_lab`: plan a step, build and train the model, save, load,
  export; docs/api.md);
- `training`: the runtime's training loop driven by the simulator's policies (`paradyse-lab train`);
- `validate_run`: train each policy for real and pair every step with its simulation (`paradyse-lab
  validate-run`).

Only this package and paradyse_lab/cli/ import `solvers`, `simulator`, `runtime` or `figures`
(tests/test_import_layers.py).
"""

from paradyse_lab.app.replay_traces import SublayerTraces
from paradyse_lab.costmodel.replay.model import set_trace_source

set_trace_source(SublayerTraces)
