"""How well the per-document zig-zag layout of packed steps balances attention across ranks.

Command:

    python -m paradyse_lab.app.measure.pack_balance github_code --pack-tokens 32768 --p 8   # --format json for scripts

Packs the workload's documents as `train --pack-tokens` does (`--pack-order`), pads
every document to the layout unit 2p and cuts each into 2p chunks,
and
prints, for causal and non-causal attention: the steps, documents per step, the padding tokens of padding every
document (what the layout costs) beside padding each pack once (what a whole-pack zig-zag would cost), and the
attention imbalance from each rank's (query, key) pairs (`paradyse_lab.runtime.model.packed.rank_attention_pairs`):
over the run,
the sum over steps of the busiest rank's pairs over the sum of the mean rank's (the attention time the run
loses to waiting for the busiest rank), and the worst single step's busiest / mean. 1.00 is perfect balance;
only the documents' padding segments (fewer than 2p tokens each) keep it from 1 exactly. The linear parts
(GEMMs, MLP) are balanced exactly: every rank holds s/p tokens.
"""

from __future__ import annotations

import argparse
import json
import sys

from tqdm import tqdm

from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.errors import UserInputError, require_positive_int
from paradyse_lab.workload.lengths import get_workload
from paradyse_lab.workload.packing import pack_documents


def balance(dataset: str, pack_tokens: int, p: int, order: str = "sorted", seed: int = 0,
            progress: bool = True) -> list[dict]:
    """One row per attention kind (causal, non-causal) with the statistics of the module docstring."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.packed import pack_sequence, rank_attention_pairs

    require_positive_int("--p", p, 1024)
    steps = pack_documents(get_workload(dataset, seed=seed).lengths, pack_tokens, order, seed)
    unit = layout_unit(p)
    rows = []
    for causal in (True, False):
        total = worst = weighted = 0.0
        for lengths in tqdm(steps, desc="causal" if causal else "non-causal", disable=not progress):
            pairs = rank_attention_pairs(pack_sequence(lengths, p), p, causal)
            ratio = max(pairs) / (sum(pairs) / p)
            worst, weighted, total = max(worst, ratio), weighted + ratio * sum(pairs), total + sum(pairs)
        rows.append({"dataset": dataset, "pack_tokens": pack_tokens, "p": p, "causal": causal, "steps": len(steps),
                     "docs_per_step": sum(map(len, steps)) / len(steps),
                     "padding_once_per_pack": sum(-sum(s) % unit for s in steps),
                     "padding_per_document": sum(-n % unit for s in steps for n in s),
                     "imbalance_mean": weighted / total, "imbalance_worst": worst})
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m paradyse_lab.app.measure.pack_balance ...` (module docstring); a bad value: one line on stderr, exit
    2."""
    parser = argparse.ArgumentParser(prog="python -m paradyse_lab.app.measure.pack_balance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="workload: github_code, grch38, uniform:LO:HI, lognormal:MEDIAN:SIGMA, "
                        "file:PATH")
    parser.add_argument("--pack-tokens", type=int, required=True, help="token budget of a step")
    parser.add_argument("--pack-order", default="sorted", help="sorted or shuffled (default %(default)s)")
    parser.add_argument("--p", type=int, default=8, help="ranks (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="workload and shuffle seed")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="json for scripts")
    args = parser.parse_args(argv)
    try:
        rows = balance(args.dataset, args.pack_tokens, args.p, args.pack_order, args.seed,
                       progress=args.format == "table")
    except UserInputError as err:
        print(f"python -m paradyse_lab.app.measure.pack_balance: error: {err}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'attention':<11} {'steps':>6} {'docs/step':>9} {'pad/pack':>9} {'pad/doc':>9} {'imbal run':>9} "
          f"{'imbal worst':>11}")
    for r in rows:
        print(f"{'causal' if r['causal'] else 'non-causal':<11} {r['steps']:>6} {r['docs_per_step']:>9.1f} "
              f"{r['padding_once_per_pack']:>9} {r['padding_per_document']:>9} {r['imbalance_mean']:>9.5f} "
              f"{r['imbalance_worst']:>11.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
